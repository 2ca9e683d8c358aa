"""What a re-rendered view weighs on the stream: a view of one element with an id goes bare (morphed
by its own id, without the page's wrapper) once the page is known to show that root; a new
stream, another root or markup of several elements goes wrapped."""

from __future__ import annotations

from pyvia import App, Context
from pyvia.testing import Tab, TestClient

ROOM = "room:a"


def make_app() -> App:
    app = App()

    @app.page("/room")
    def room(c: Context) -> None:
        c.scope(ROOM)
        count = c.signal(0, "count", scope=ROOM)
        split = c.signal(False, "split", scope=ROOM)

        @c.action
        def bump() -> None:
            count.increment()

        @c.action
        def toggle() -> None:
            split.value = not split.value

        def view() -> str:
            if split.value:
                return f'<p id="n">{count.value}</p><p>apart</p>'
            return f'<section id="board"><b id="n">{count.value}</b></section>'

        c.view(view, share_render=True)

    return app


def view_frames(tab: Tab) -> list[str]:
    """The elements of each whole-view frame the tab got since the last call."""
    return [e.elements for e in tab.new_events() if e.type == "datastar-patch-elements"]


def test_a_stable_root_goes_bare_after_the_first_frame() -> None:
    with TestClient(make_app()) as client:
        tab, other = client.open("/room"), client.open("/room")
        client.clock.advance(1)
        view_frames(tab)
        other.action("bump")
        client.clock.advance(1)
        assert view_frames(tab) == ['<div id="via-view"><section id="board"><b id="n">1</b></section></div>']
        other.action("bump")
        client.clock.advance(1)
        assert view_frames(tab) == ['<section id="board"><b id="n">2</b></section>']
        assert tab.html == '<section id="board"><b id="n">2</b></section>'  # morphed by its id


def test_another_shape_goes_wrapped_and_so_does_the_first_frame_of_a_new_stream() -> None:
    with TestClient(make_app()) as client:
        tab, other = client.open("/room"), client.open("/room")
        client.clock.advance(1)
        for _ in range(2):
            other.action("bump")
            client.clock.advance(1)
        view_frames(tab)
        other.action("toggle")  # two elements: no root of its own
        client.clock.advance(1)
        assert view_frames(tab) == ['<div id="via-view"><p id="n">2</p><p>apart</p></div>']
        other.action("toggle")  # one element again, but the page shows no such root: wrapped
        client.clock.advance(1)
        assert view_frames(tab) == ['<div id="via-view"><section id="board"><b id="n">2</b></section></div>']
        tab.disconnect()
        other.action("bump")
        client.clock.advance(1)
        tab.reconnect()  # what the page got of the old stream is not known: the first view is wrapped
        client.clock.advance(1)
        assert view_frames(tab) == ['<div id="via-view"><section id="board"><b id="n">3</b></section></div>']
        other.action("bump")
        client.clock.advance(1)
        assert view_frames(tab) == ['<section id="board"><b id="n">4</b></section>']
        assert tab.html == '<section id="board"><b id="n">4</b></section>'
