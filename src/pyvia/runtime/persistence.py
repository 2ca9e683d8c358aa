"""Persistence: the shared state and the tab records kept across a graceful restart, in a file
(``persist_path``) or the app's database (``persist_in_db``); the formats are :mod:`pyvia.persistence`'s."""

from __future__ import annotations

import logging
import typing
from typing import Any

from pyvia.persistence import load_state, load_state_from_db, save_state, save_state_to_db
from pyvia.runtime.common import GRAVEYARD_CAP
from pyvia.runtime.revival import json_or_empty

if typing.TYPE_CHECKING:
    from pyvia.app import App
    from pyvia.runtime import Runtime

log = logging.getLogger("pyvia")


class Persistence:
    """Saves and restores the shared state and the tab records of an app."""

    def __init__(self, app: App, rt: Runtime) -> None:
        self.app = app
        self.rt = rt

    def save_file(self) -> None:
        signals = self.app.scopes.saved_values()
        sessions = [(sid, dict(data)) for sid, data in self.app.sessions.items()]
        rows = save_state(
            self.app.config.persist_path,  # type: ignore[arg-type]  # checked by the caller
            global_state=dict(self.app.global_state),
            signals=signals,
            sessions=sessions,
            tabs=self.tab_records(),
        )
        log.info("kept %d values of shared state in %s", rows, self.app.config.persist_path)

    @property
    def in_db(self) -> bool:
        """Shared state is kept in the app's database across graceful restarts: ``persist_in_db``
        is on and no engine holds the state (one worker)."""
        return self.app.config.persist_in_db and not self.app.store.shared

    async def save_to_db(self) -> None:
        signals = self.app.scopes.saved_values()
        sessions = [(sid, dict(data)) for sid, data in self.app.sessions.items()]
        rows = await save_state_to_db(
            self.app.db,
            global_state=dict(self.app.global_state),
            signals=signals,
            sessions=sessions,
            tabs=self.tab_records(),
        )
        log.info("kept %d values of shared state in the database", rows)

    async def restore_from_db(self) -> None:
        """Read back what the last graceful stop kept in the database (``startup`` calls it)."""
        global_state, signals, sessions, tabs = await load_state_from_db(self.app.db)
        for key, value in global_state.items():
            self.app.global_state.receive(key, value)
        self.app.scopes.restore(signals)
        for sid, data in sessions.items():
            self.app.sessions.get(sid).receive(data)
        self.restore_tabs(tabs)

    def restore_file(self) -> None:
        global_state, signals, sessions, tabs = load_state(self.app.config.persist_path)  # type: ignore[arg-type]  # checked by the caller
        self.app.global_state.update(global_state)
        self.app.scopes.restore(signals)
        for sid, data in sessions.items():
            self.app.sessions.get(sid).update(data)
        self.restore_tabs(tabs)

    def tab_records(self) -> list[tuple[str, dict[str, Any]]]:
        """What revives each live or recently destroyed tab, for the next process (a graceful restart)."""
        records = []
        for ctx in self.rt.registry.contexts.values():
            try:
                snapshot = ctx.final_snapshot()
            except TypeError:
                snapshot = None
            records.append(
                (
                    ctx.id,
                    {"tab_state": json_or_empty(ctx.held_tab_state), "seq": ctx.snapshot_seq, "snapshot": snapshot},
                )
            )
        for ctx_id, grave in self.rt.revival.graveyard.items():
            if ctx_id not in self.rt.registry.contexts:
                records.append(
                    (
                        ctx_id,
                        {"tab_state": json_or_empty(grave.tab_state), "seq": grave.seq, "snapshot": grave.snapshot},
                    )
                )
        return records[-GRAVEYARD_CAP:]

    def restore_tabs(self, tabs: dict[str, dict[str, Any]]) -> None:
        """The tab records an earlier process kept: they revive the tabs that come back here."""
        for ctx_id, record in tabs.items():
            self.rt.revival.vouch(ctx_id, record, restored=True)
