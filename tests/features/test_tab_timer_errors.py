"""A tab's own timer (``c.set_interval``) that fails is reported and keeps its period."""

from __future__ import annotations

from pyvia import App, Context
from pyvia.testing import TestClient


def test_a_failing_tab_timer_is_reported_and_runs_again() -> None:
    app = App()
    errors: list[tuple[str, str, bool]] = []
    app.on_error(lambda exc, ctx, phase: errors.append((phase, str(exc), ctx is not None)))
    calls = {"n": 0}

    @app.page("/")
    def page(c: Context) -> None:
        ticks = c.signal(0, "ticks")

        def tick() -> None:
            calls["n"] += 1
            if calls["n"] == 2:
                raise RuntimeError("flaky")
            ticks.value += 1

        c.set_interval(tick, 1.0)
        c.view(lambda: "<p></p>")

    with TestClient(app, raise_server_exceptions=False) as client:
        tab = client.open("/")
        client.clock.advance(3.5)
        assert calls["n"] == 3
        assert errors == [("timer", "flaky", True)]
        assert tab.signals["_ticks"] == 2
