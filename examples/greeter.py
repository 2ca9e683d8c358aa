"""A greeter: a form with an input bound to a signal, answered by the server.

Run it with ``pyvia run examples.greeter:app --port 3000``.
"""

from pyvia import App, Context, html

app = App(title="Greeter")
MAX_NAME = 100  # characters


@app.page("/")
def greeter(c: Context) -> None:
    name = c.signal("", "name", writable=True, max_length=MAX_NAME)  # the input the user types into
    greeting = c.signal("", "greeting")  # server-owned: only the server writes it

    @c.action
    def greet() -> None:
        who = name.as_str().strip()
        greeting.value = f"Hello, {who}!" if who else "Tell me your name first."

    c.view(
        lambda: html(
            """
<main>
  <h1>Greeter</h1>
  <form id="form" data-on:submit__prevent="{greet}">
    <label>Your name <input id="name" {bind} maxlength="{max_name}" autocomplete="off"></label>
    <button id="greet" type="submit">Greet</button>
  </form>
  <p id="greeting" data-text="{greeting}"></p>
</main>""",
            greet=greet,
            bind=name.bind(),
            max_name=MAX_NAME,
            greeting=greeting.ref(),
        )
    )


if __name__ == "__main__":
    app.run(host="127.0.0.1", port=3000)
