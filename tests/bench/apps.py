"""Apps that misbehave on purpose, so the harness's checks can be seen to catch them.

* ``failing``: a shared counter whose every fifth action raises, so the server answers 500;
* ``lossy``: a shared counter that answers 200 to every action but drops every fifth increment
  (a lost update, what a read-modify-write race looks like from outside).
"""

from __future__ import annotations

from pyvia import App, Context, Scope


def _counter(name: str, *, fail: bool) -> App:
    app = App(title=name, action_rate=0)
    calls = {"n": 0}

    @app.page("/")
    def page(c: Context) -> None:
        c.scope(Scope.ROUTE)
        count = c.signal(0, "count", scope=Scope.ROUTE)

        @c.action
        def increment() -> None:
            calls["n"] += 1
            if calls["n"] % 5 == 0:
                if fail:
                    raise RuntimeError("every fifth action fails")
                return
            count.increment()

        c.view(lambda: f'<p id="count">{count.value}</p>', share_render=True)

    return app


failing = _counter("failing", fail=True)
lossy = _counter("lossy", fail=False)
