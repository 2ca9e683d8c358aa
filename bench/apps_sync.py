"""The app of ``python -m bench.instructions --kind sync``: an action that re-renders its tab's view.

A chat-like page whose view, one ``<main>`` over about fifty lines, lists the last 40 messages of
the tab's own list; ``increment`` adds one and calls ``c.sync()``, so each click renders the view
and writes its patch (with the changed signal) to the tab's stream: what the view's frame costs
where each tab renders its own.
"""

from __future__ import annotations

from pyvia import App, Context, html

app = App(title="Sync")


@app.page("/")
def page(c: Context) -> None:
    count = c.signal(0, "count")
    said = [f"message {i} with some words & more" for i in range(40)]

    @c.action
    def increment() -> None:
        count.value += 1
        said.append(f"message {count.value} with some words & more")
        del said[:-40]
        c.sync()

    def view() -> str:
        rows = "\n".join(html('    <li id="m{}"><b>user</b> {}</li>', i, text) for i, text in enumerate(said))
        return str(
            html(
                '\n<main id="chat">\n  <h2>Room</h2>\n  <p id="n">{}</p>\n  <ul id="msgs">\n{}\n  </ul>\n'
                '  <button id="add" data-on:click="{}">+</button>\n</main>\n',
                count.value,
                html(rows),
                increment,
            )
        )

    c.view(view)
