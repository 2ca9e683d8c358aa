"""The app of the form-attack tests: a counter tab, and an action that reports what a form held.

Served in its own process (``tests.security.servers``), so its event loop is not the test's.
"""

from __future__ import annotations

from pyvia import App, Context

#: Forms of up to 4 MiB of fields (a site taking long texts): a costly but legitimate one can be sent.
app = App(title="forms", action_rate=0, max_form_bytes=4 << 20)


@app.page("/")
def page(c: Context) -> None:
    count = c.signal(0, "count")
    received = c.signal("", "received")

    @c.action
    def inc() -> None:
        count.value += 1

    @c.action
    def upload() -> None:
        received.value = f"a of {len(c.input('a', ''))} characters, {len(c.files_of('f'))} files"

    c.view(lambda: f"<p id='n'>{count.value}</p><p id='received'>{received.value}</p>")
