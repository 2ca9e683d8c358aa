"""A live poll: one vote per browser, results redrawn for everyone on the page as votes arrive.

Each option's count is a ROUTE-scoped shared signal, held by the app so the votes outlast the
tabs, and bumped with ``increment()``. Who voted is remembered on the server, in the session's
``c.session_data``, and shown through a SESSION-scoped signal, so every tab of the browser knows
at once. A vote marks the page's scope; the flush renders the bar chart once and sends the same
bytes to every tab (``share_render=True``): the chart shows nothing of one browser, and "your
vote" is a ``data-*`` binding on the session signal.
"""

from __future__ import annotations

from pyvia import App, Context, Markup, Scope, html

app = App(
    title="Live poll",
    head=[
        """<style>
  body { font-family: system-ui, sans-serif; margin: 2rem; max-width: 34rem; }
  .option { margin: .6rem 0; }
  .option header { display: flex; justify-content: space-between; align-items: center; gap: .5rem; }
  .option.mine header strong::after { content: " (your vote)"; font-weight: normal; color: #2e7d32; }
  .track { background: #eee; border-radius: 4px; height: 1.2rem; margin-top: .2rem; }
  .bar { background: #4f7cff; height: 100%; border-radius: 4px; transition: width .3s; }
  .option.mine .bar { background: #2e7d32; }
</style>"""
    ],
)

QUESTION = "Which feature should we build next?"
OPTIONS = {  # id: label
    "dark": "Dark mode",
    "offline": "Offline support",
    "export": "Export to CSV",
    "api": "A public API",
}
PAGE = Scope.route("/")
votes = {key: app.signal(0, f"votes_{key}", scope=PAGE) for key in OPTIONS}


@app.page("/")
def poll(c: Context) -> None:
    c.scope(Scope.ROUTE)
    counts = {key: c.signal(0, f"votes_{key}", scope=Scope.ROUTE) for key in OPTIONS}  # join them
    choice = c.signal(c.session_data.get("vote", ""), "choice", scope=Scope.SESSION)
    mine = choice.ref()  # $_session__choice

    @c.action
    def vote(key: str) -> None:  # the view binds it: vote(key="dark"); a user may post any string
        if key not in OPTIONS or c.session_data.get("vote"):
            return  # unknown option, or this browser has voted already
        c.session_data["vote"] = key  # no await between the check and here: one vote per session
        counts[key].increment()  # atomic; marks the page's scope for the next flush
        choice.value = key  # every tab of this browser learns it

    def option(key: str, label: str, total: int) -> Markup:
        n = counts[key].value
        pct = round(100 * n / total) if total else 0
        return html(
            """
  <div class="option" id="option-{key}" data-class:mine="{mine} == '{key}'">
    <header><strong>{label}</strong>
      <span><span id="count-{key}">{n}</span> ({pct}%)
        <button id="vote-{key}" data-attr:disabled="{mine} != ''" data-on:click="{vote}">Vote</button>
      </span>
    </header>
    <div class="track"><div class="bar" id="bar-{key}" style="width: {pct}%"></div></div>
  </div>""",
            key=key,
            mine=mine,
            label=label,
            n=n,
            pct=pct,
            vote=vote(key=key),
        )

    def view() -> Markup:
        total = sum(sig.value for sig in counts.values())
        return html(
            """
<main>
  <h1>{question}</h1>
  {options}
  <p><span id="total">{total}</span> votes so far.
     <span id="thanks" data-show="{mine} != ''">Thanks for voting!</span></p>
</main>""",
            question=QUESTION,
            options=(option(key, label, total) for key, label in OPTIONS.items()),
            total=total,
            mine=mine,
        )

    c.view(view, share_render=True)


if __name__ == "__main__":
    app.run(host="127.0.0.1", port=3000)
