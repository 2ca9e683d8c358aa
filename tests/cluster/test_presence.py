"""Presence from the other workers re-renders a scope only once something asks for a count: an
app that never shows one must not rewrite every tab's view each time the counts change."""

from __future__ import annotations

import orjson

from pyvia import App
from pyvia.cluster import MemoryEngine, MemoryHub
from pyvia.cluster.link import ClusterLink
from pyvia.scopes import Scope


def _told(link: ClusterLink, node: str, count: int) -> None:
    link.presence._on_presence("presence", orjson.dumps({"n": node, "c": {Scope.route("/"): count}}))


def test_counts_from_another_worker_re_render_only_once_a_count_was_asked_for() -> None:
    app = App()
    link = ClusterLink(app, MemoryEngine(MemoryHub()))
    state = app.scopes.state(Scope.route("/"))

    _told(link, "other", 3)
    assert state.name not in app.broadcaster.pending  # nobody shows a count: nothing to re-render
    assert link.remote_count(Scope.route("/")) == 3  # the count itself is kept all the same

    _told(link, "other", 4)  # a count was asked for (a view showing "N watching")
    assert app.broadcaster.pending.get(state.name) is state
    app.broadcaster.pending.clear()
    _told(link, "other", 4)  # unchanged: nothing to re-render
    assert state.name not in app.broadcaster.pending
