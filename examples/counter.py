"""A tab-private counter: each browser tab has its own count and step.

Run it with ``pyvia run examples.counter:app`` (or ``python examples/counter.py``) and open
http://127.0.0.1:3000 in two tabs: they count independently, and a tab keeps its count when its
connection drops or the server restarts.
"""

from pathlib import Path

from pyvia import App, Context

app = App(title="Counter", template_dir=Path(__file__).parent / "templates")


@app.page("/")
def counter(c: Context) -> None:
    count = c.signal(0, "count")
    step = c.signal(1, "step", writable=True)

    @c.action
    def increment() -> None:
        count.value += step.as_int(1)

    @c.action
    def decrement() -> None:
        count.value -= step.as_int(1)

    @c.action
    def reset() -> None:
        count.value = 0

    c.view("counter.html", block="counter")


if __name__ == "__main__":
    app.run(host="127.0.0.1", port=3000)
