"""The Datastar 1.0 SDK specification's examples (``sdk/ADR.md``), sent through ``Context``'s public
methods by the native server on loopback: what a tab's stream carries is the spec's bytes, the
order of option lines aside, followed by the tab's own frame id."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from pyvia import App, Context
from tests.features.wire import SseEvent, WireTab, parse_sse
from tests.helpers import running_server

SIGNALS = '{"output":"Patched Output Test","show":true,"input":"Test","user":{"name":"","email":""}}'
NESTED = """{
  "user": {
    "name": "Johnny",
    "email": null,
    "preferences": {
      "theme": "dark"
    }
  }
}"""

#: name -> (what the page's action calls, the spec's example output)
EXAMPLES: dict[str, tuple[Callable[[Context], None], str]] = {
    "patch-elements minimal": (
        lambda c: c.patch_elements('<div id="feed"><span>1</span></div>'),
        'event: datastar-patch-elements\ndata: elements <div id="feed"><span>1</span></div>\n\n',
    ),
    "patch-elements every option": (
        lambda c: c.patch_elements(
            '<div id="feed">\n    <span>1</span>\n</div>',
            "#feed",
            "inner",
            use_view_transition=True,
            event_id="123",
            retry=2000,
        ),
        "event: datastar-patch-elements\nid: 123\nretry: 2000\ndata: mode inner\ndata: selector #feed\n"
        'data: useViewTransition true\ndata: elements <div id="feed">\ndata: elements     <span>1</span>\n'
        "data: elements </div>\n\n",
    ),
    "patch-elements by id": (
        lambda c: c.patch_elements('<div id="id1">New content.</div>\n<div id="id2">Other new content.</div>'),
        'event: datastar-patch-elements\ndata: elements <div id="id1">New content.</div>\n'
        'data: elements <div id="id2">Other new content.</div>\n\n',
    ),
    "patch-elements insert at a selector": (
        lambda c: c.patch_elements("<div>New content</div>", selector="#mycontainer", mode="append"),
        "event: datastar-patch-elements\ndata: mode append\ndata: selector #mycontainer\n"
        "data: elements <div>New content</div>\n\n",
    ),
    "patch-elements remove by selector": (
        lambda c: c.remove_elements("#feed, #otherid"),
        "event: datastar-patch-elements\ndata: mode remove\ndata: selector #feed, #otherid\n\n",
    ),
    "patch-elements remove mode": (
        lambda c: c.patch_elements(selector="#feed, #otherid", mode="remove"),
        "event: datastar-patch-elements\ndata: mode remove\ndata: selector #feed, #otherid\n\n",
    ),
    "patch-elements svg namespace": (  # the shipped client's namespace option
        lambda c: c.patch_elements('<circle id="c1" cx="10" r="5" fill="red"/>', "#vis", "append", namespace="svg"),
        "event: datastar-patch-elements\ndata: mode append\ndata: selector #vis\ndata: namespace svg\n"
        'data: elements <circle id="c1" cx="10" r="5" fill="red"/>\n\n',
    ),
    "patch-elements mathml namespace": (
        lambda c: c.patch_elements("<mi>x</mi>", "#m", "inner", namespace="mathml"),
        "event: datastar-patch-elements\ndata: selector #m\ndata: mode inner\ndata: namespace mathml\n"
        "data: elements <mi>x</mi>\n\n",
    ),
    "patch-elements default retry is not sent": (
        lambda c: c.patch_elements('<p id="a">1</p>', retry=1000),
        'event: datastar-patch-elements\ndata: elements <p id="a">1</p>\n\n',
    ),
    "patch-signals minimal": (
        lambda c: c.patch_signals(
            {"output": "Patched Output Test", "show": True, "input": "Test", "user": {"name": "", "email": ""}}
        ),
        f"event: datastar-patch-signals\ndata: signals {SIGNALS}\n\n",
    ),
    "patch-signals every option": (
        lambda c: c.patch_signals(SIGNALS, only_if_missing=True, event_id="123", retry=2000),
        f"event: datastar-patch-signals\nid: 123\nretry: 2000\ndata: onlyIfMissing true\ndata: signals {SIGNALS}\n\n",
    ),
    "patch-signals raw json on several lines": (
        lambda c: c.patch_signals(NESTED),
        "event: datastar-patch-signals\n" + "".join(f"data: signals {line}\n" for line in NESTED.split("\n")) + "\n",
    ),
    "patch-signals remove": (
        lambda c: c.remove_signals("signalToRemove"),
        'event: datastar-patch-signals\ndata: signals {"signalToRemove":null}\n\n',
    ),
    "patch-signals remove nested paths": (
        lambda c: c.remove_signals(["user.email", "user.phone", "draft"]),
        'event: datastar-patch-signals\ndata: signals {"user":{"email":null,"phone":null},"draft":null}\n\n',
    ),
    "execute-script minimal": (
        lambda c: c.exec_script("console.log('Here')", auto_remove=False),
        "event: datastar-patch-elements\ndata: mode append\ndata: selector body\n"
        "data: elements <script>console.log('Here')</script>\n\n",
    ),
    "execute-script every option": (
        lambda c: c.exec_script(
            "console.log('Here')", attributes=['type="application/javascript"'], event_id="123", retry=2000
        ),
        "event: datastar-patch-elements\nid: 123\nretry: 2000\ndata: mode append\ndata: selector body\n"
        'data: elements <script type="application/javascript" data-effect="el.remove()">console.log(\'Here\')'
        "</script>\n\n",
    ),
    "execute-script attributes as a mapping": (
        lambda c: c.exec_script("import('/m.js')", attributes={"type": "module", "data-x": 'a"b'}),
        "event: datastar-patch-elements\ndata: mode append\ndata: selector body\n"
        'data: elements <script type="module" data-x="a&quot;b" data-effect="el.remove()">import(\'/m.js\')'
        "</script>\n\n",
    ),
}


def make_app() -> App:
    app = App()

    @app.page("/")
    def page(c: Context) -> None:
        for i, (send, _) in enumerate(EXAMPLES.values()):
            c.action(lambda send=send: send(c), name=f"example{i}")
        c.view(lambda: '<div id="feed"></div>')

    return app


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, int]]:
    with running_server(make_app()) as address:
        yield address


def canonical(events: list[SseEvent]) -> list[tuple[str, str | None, str | None, list[str], list[str]]]:
    return [e.canonical() for e in events]


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_the_spec_example_reaches_the_tab_as_written(server: tuple[str, int], name: str) -> None:
    tab = WireTab(*server)
    assert tab.open_stream() == 200
    tab.read_frame()  # the connect event
    assert tab.action(f"example{list(EXAMPLES).index(name)}") == 200
    frame = tab.read_frame()
    tab.close_stream()
    *events, frame_id = frame
    assert frame_id.type == "" and frame_id.data == [] and frame_id.id == tab.last_event_id
    assert canonical(events) == canonical(parse_sse(EXAMPLES[name][1]))


def test_the_option_lines_come_in_the_spec_s_order(server: tuple[str, int]) -> None:
    # The spec's "Implementation" order: event, id, retry, then the data lines (selector, mode,
    # useViewTransition before the elements); the byte-exact text of one full event.
    tab = WireTab(*server)
    tab.open_stream()
    tab.read_frame()
    tab.action(f"example{list(EXAMPLES).index('patch-elements every option')}")
    assert tab.stream is not None
    chunk = tab.stream.read_chunk()
    tab.close_stream()
    assert chunk.startswith(
        b"event: datastar-patch-elements\nid: 123\nretry: 2000\ndata: selector #feed\ndata: mode inner\n"
        b'data: useViewTransition true\ndata: elements <div id="feed">\ndata: elements     <span>1</span>\n'
        b"data: elements </div>\n\n"
    )
