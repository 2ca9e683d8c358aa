"""Durations are seconds everywhere: timers and throttles too; the old ms= keywords warn."""

from __future__ import annotations

import pytest

from pyvia import App, Context
from pyvia.testing import TestClient


def _ticking_app(calls: list[str]) -> App:
    app = App()

    @app.page("/")
    def page(c: Context) -> None:
        c.set_interval(lambda: calls.append("tab"), 0.25)
        c.view(lambda: "<p></p>")

    app.set_interval(lambda: calls.append("app"), 0.5)
    return app


def test_set_interval_takes_seconds() -> None:
    calls: list[str] = []
    with TestClient(_ticking_app(calls)) as client:
        client.open("/")
        client.clock.advance(1.01)
        assert calls.count("tab") == 4 and calls.count("app") == 2


def test_the_old_ms_keyword_still_works_with_a_deprecation_warning() -> None:
    calls: list[str] = []
    app = App()
    with pytest.warns(DeprecationWarning, match=r"set_interval\(ms=\.\.\.\) is deprecated.*0\.5"):
        app.set_interval(lambda: calls.append("app"), ms=500)

    @app.page("/")
    def page(c: Context) -> None:
        with pytest.warns(DeprecationWarning, match="in seconds"):
            c.set_interval(lambda: calls.append("tab"), ms=250)
        c.view(lambda: "<p></p>")

    with TestClient(app) as client:
        client.open("/")
        client.clock.advance(1.01)
        assert calls.count("tab") == 4 and calls.count("app") == 2


def test_a_period_given_twice_or_not_at_all_is_refused() -> None:
    app = App()
    with pytest.raises(TypeError, match="seconds or ms=, not both"):
        app.set_interval(print, 1.0, ms=1000)
    with pytest.raises(TypeError, match="needs a period in seconds"):
        app.set_interval(print)


def test_broadcast_throttle_takes_seconds_and_warns_for_milliseconds() -> None:
    app = App()
    app.broadcast_throttle("room:*", 0.5)
    with pytest.warns(DeprecationWarning, match="broadcast_throttle"):
        app.broadcast_throttle("lobby", min_interval_ms=500)
    assert app.broadcaster._interval_for("room:a") == 0.5
    assert app.broadcaster._interval_for("lobby") == 0.5
    assert app.broadcaster._interval_for("elsewhere") == 0.0
