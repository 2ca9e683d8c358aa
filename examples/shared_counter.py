"""A counter shared by everyone on the page: open it in two tabs and click in one.

The count is a ROUTE-scoped signal: one value for every tab on ``/``. Each click marks the route
scope; a flush (at most every 25 ms) renders the view once (``share_render=True``) and writes
the same bytes to every tab.
"""

from pyvia import App, Context, Scope, html

app = App(title="Shared counter")
PAGE_SCOPE = Scope.route("/")


@app.on_connect
@app.on_disconnect
def presence_changed(c: Context) -> None:
    app.broadcast(PAGE_SCOPE)  # the "N watching" line changes


@app.page("/")
def shared_counter(c: Context) -> None:
    c.scope(Scope.ROUTE)
    count = c.signal(0, "count", scope=Scope.ROUTE)

    @c.action
    def increment() -> None:
        count.increment()

    @c.action
    def reset() -> None:
        count.value = 0

    c.view(
        lambda: html(
            """
<main id="shared">
  <h1>Shared counter</h1>
  <p>Everyone on this page sees <strong id="count">{count}</strong></p>
  <button id="inc" data-on:click="{increment}">+1</button>
  <button id="reset" data-on:click="{reset}">Reset</button>
  <p id="watching">{watching} watching</p>
</main>""",
            count=count.value,
            increment=increment,
            reset=reset,
            watching=app.count_clients(c.primary_scope),
        ),
        share_render=True,
    )


if __name__ == "__main__":
    app.run(host="127.0.0.1", port=3000)
