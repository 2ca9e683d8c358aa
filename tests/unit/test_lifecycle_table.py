"""The lifecycle table is the only writer of a context's state (issue 20)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from pyvia import App, Context
from pyvia.lifecycle import EXPIRES, TRANSITIONS, Event, State, move, next_state
from pyvia.testing import Tab, TestClient

SRC = Path(__file__).resolve().parents[2] / "src" / "pyvia"


def test_destroyed_is_the_end_and_every_live_state_can_get_there() -> None:
    assert not [pair for pair in TRANSITIONS if pair[0] is State.DESTROYED]
    assert all((state, Event.DESTROY) in TRANSITIONS for state in State if state is not State.DESTROYED)
    assert {next_state(s, Event.CONNECT) for s in EXPIRES} == {State.CONNECTED}
    with pytest.raises(LookupError, match="a DESTROYED context cannot connect"):
        next_state(State.DESTROYED, Event.CONNECT)
    with pytest.raises(LookupError, match="a CREATED context cannot disconnect"):
        next_state(State.CREATED, Event.DISCONNECT)


STATE_NAMES = {state.name for state in State}


def test_no_module_sets_a_context_state_but_through_the_table() -> None:
    writers = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    value = node.value
                    if (
                        isinstance(target, ast.Attribute)
                        and target.attr == "state"
                        and (
                            (
                                isinstance(value, ast.Attribute)
                                and isinstance(value.value, ast.Name)
                                and value.value.id == "State"
                            )
                            or (isinstance(value, ast.Name) and value.id in STATE_NAMES)  # lifecycle's module names
                        )
                    ):
                        writers.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert [w.split(":")[0] for w in writers] == ["context.py"], writers  # its initial state only


def test_a_tab_moves_through_the_table_from_page_to_destroyed() -> None:
    app = App()

    @app.page("/")
    def page(c: Context) -> None:
        c.view(lambda: "<p>hi</p>")

    with TestClient(app) as client:
        tab = Tab(client, "/", client.get("/"))
        ctx = app.contexts[tab.id]
        assert ctx.state is State.CREATED
        tab.connect()
        assert ctx.state is State.CONNECTED
        tab.disconnect()
        assert ctx.state is State.DISCONNECTED
        client.clock.advance(app.config.reconnect_timeout + app.config.cleanup_delay + 10)
        assert ctx.state is State.DESTROYED
        with pytest.raises(LookupError):
            move(ctx, Event.CONNECT)
