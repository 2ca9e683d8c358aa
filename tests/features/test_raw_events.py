"""Events made by the datastar-py SDK go through a context, checked so they cannot forge others."""

from __future__ import annotations

import pytest
from datastar_py import ServerSentEventGenerator as SSE

from pyvia import App, Context
from pyvia.protocol import check_events
from pyvia.testing import TestClient


def make_app() -> App:
    app = App()

    @app.page("/")
    def page(c: Context) -> None:
        @c.action
        def sdk() -> None:
            c.send_raw(SSE.patch_elements('<p id="from-sdk">hello</p>'))
            c.send_raw(SSE.patch_signals({"sdk": 1}))

        c.view(lambda: '<p id="from-sdk"></p>')

    return app


def test_sdk_events_reach_the_tab() -> None:
    with TestClient(make_app()) as client:
        tab = client.open("/")
        tab.action("sdk")
        assert '<p id="from-sdk">hello</p>' in tab.html
        assert tab.signals["sdk"] == 1


@pytest.mark.parametrize(
    "bad",
    [
        "event: datastar-patch-elements\ndata: selector #x\nevent: datastar-patch-signals\n\n",
        "event: something-else\ndata: x\n\n",
        "event: datastar-patch-signals\ndata: signals {}\n",
        "event: datastar-patch-signals\r\ndata: signals {}\n\n",
        "data: signals {}\n\n",
        "event: datastar-patch-signals\nnot a field\n\n",
    ],
)
def test_malformed_or_forged_raw_events_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        check_events(bad)


def test_sdk_selector_with_a_line_break_cannot_forge_an_event() -> None:
    forged = SSE.patch_elements("<p>x</p>", selector="#a\nevent: datastar-patch-signals\ndata: signals {}")
    with pytest.raises(ValueError):
        check_events(forged)
