"""Presence from the other workers re-renders a scope only once something asks for a count: an
app that never shows one must not rewrite every tab's view each time the counts change."""

from __future__ import annotations

import time

import orjson

from pyvia import App, Context
from pyvia.cluster import MemoryEngine, MemoryHub
from pyvia.cluster.link import ClusterLink
from pyvia.runtime.ownership import LocalOwnership
from pyvia.scopes import Scope
from pyvia.testing import TestClient


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


def test_a_view_showing_another_scopes_count_re_renders_when_another_worker_tells_a_new_one() -> None:
    # An admin page, in a scope of its own, shows how many tabs are in the wizard's scope. A tab
    # leaving the wizard on another worker broadcasts the admin scope from its hook at once, but its
    # worker tells its count only up to 250 ms later: the admin re-rendered then showed the old
    # count until something else changed (a newcomer's dashboard stayed one too high after a reload).
    app = App()
    link = ClusterLink(app, MemoryEngine(MemoryHub()))

    class Counted(LocalOwnership):  # tabs here, counts of the others from the link's presence
        def remote_count(self, scope: str) -> int:
            return link.presence.remote_count(scope)

    app.ownership = Counted()

    @app.page("/admin")
    def admin(c: Context) -> None:
        c.scope("admin")
        c.view(lambda: f'<p id="n">{app.count_clients("wiz")} in the wizard</p>', share_render=True)

    @app.page("/mine")
    def mine(c: Context) -> None:  # a tab of its own that shows the count too
        c.view(lambda: f'<p id="n">{app.count_clients("wiz:*")} in any wizard</p>')

    @app.page("/other")
    def other(c: Context) -> None:
        c.view(lambda: '<p id="o">no count here</p>')

    def tell(count: int) -> None:
        link.presence._on_presence("presence", orjson.dumps({"n": "other", "c": {"wiz": count, "wiz:1": count}}))

    with TestClient(app) as client:
        tell(3)
        first, second = client.open("/admin"), client.open("/admin")
        own, plain = client.open("/mine"), client.open("/other")
        assert "3 in the wizard" in first.html and "3 in any wizard" in own.html
        for tab in (first, second, own, plain):
            tab.new_events()
        tell(2)
        client.clock.advance(1)
        assert "2 in the wizard" in first.html and "2 in the wizard" in second.html
        assert "2 in any wizard" in own.html
        assert plain.new_events() == []  # shows no count: not rewritten
        for tab in (first, second, own):
            tab.new_events()
        tell(2)  # unchanged: nothing to re-render
        client.clock.advance(1)
        assert first.new_events() == [] and own.new_events() == []
        own.expire()  # its tab is gone: dropped from the readers
        tell(1)
        client.clock.advance(1)
        assert "1 in the wizard" in first.html
        link.presence._expire(time.monotonic() + 60)  # the other worker went silent (killed)
        client.clock.advance(1)
        assert "0 in the wizard" in first.html and "0 in the wizard" in second.html
