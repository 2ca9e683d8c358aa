"""What a re-rendered view weighs on the stream: a view of one element with an id goes bare (morphed
by its own id, without the page's wrapper) once the page is known to show that root; a new
stream, another root or markup of several elements goes wrapped."""

from __future__ import annotations

from pyvia import App, Context
from pyvia.components import Component
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


def board_with_a_clock() -> App:
    """A shared count in the view, and a component that a timer re-renders on its own."""
    app = App()

    @app.page("/")
    def board(c: Context) -> None:
        c.scope(ROOM)
        count = c.signal(0, "count", scope=ROOM)

        @c.action
        def bump() -> None:
            count.increment()

        def clock(comp: Component) -> None:
            ticks = comp.signal(0, "ticks")

            def tick() -> None:
                ticks.value += 1
                comp.sync()

            comp.view(lambda: f'<b id="ticks">{ticks.value}</b>')
            c.set_interval(tick, 1.0)

        part = c.component(clock, "clock")
        c.view(lambda: f'<main id="board"><b id="n">{count.value}</b>{part}</main>', share_render=True)

    return app


def test_a_component_frame_does_not_replace_a_view_held_for_a_slow_reader() -> None:
    with TestClient(board_with_a_clock()) as client:
        tab, other = client.open("/"), client.open("/")
        client.clock.advance(0.5)
        ctx = tab.context
        assert ctx is not None
        ctx.stream.max_buffer = 200  # a view waits while more than this is unread
        tab.pause()  # the page stops reading
        other.action("bump")
        client.clock.advance(0.05)  # written, unread
        other.action("bump")
        client.clock.advance(0.05)  # held: the reader is behind
        assert ctx.stream.held_view is not None
        client.clock.advance(0.5)  # the clock's frame comes while the board's view is held
        tab.resume()
        client.clock.advance(0.1)
        assert '<b id="ticks">1</b>' in tab.html
        assert '<b id="n">2</b>' in tab.html  # the board's view went out before the clock's frame


def test_a_tab_between_two_streams_is_not_rendered_and_comes_back_to_the_current_view() -> None:
    renders: dict[str, int] = {}
    app = App()

    @app.page("/")
    def board(c: Context) -> None:
        c.scope(ROOM)
        count = c.signal(0, "count", scope=ROOM)

        @c.action
        def bump() -> None:
            count.increment()

        def view() -> str:
            renders[c.id] = renders.get(c.id, 0) + 1  # a view that does something per render
            return f'<main id="board"><b id="n">{count.value}</b></main>'

        c.view(view)

    with TestClient(app) as client:
        tab, other = client.open("/"), client.open("/")
        client.clock.advance(0.5)
        tab.disconnect()  # a reload, a hidden tab: no stream for a moment
        before = renders[tab.id]
        for _ in range(3):
            other.action("bump")
            client.clock.advance(0.1)
        assert renders[tab.id] == before  # three broadcasts, no render for a tab nobody sees
        assert '<b id="n">3</b>' in other.html
        tab.reconnect()
        client.clock.advance(0.1)
        assert renders[tab.id] == before + 1  # its next stream opens with the current view
        assert '<b id="n">3</b>' in tab.html
