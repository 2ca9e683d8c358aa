"""Page contexts waiting for their first stream are bounded (``max_waiting_contexts``, issue 21
item 4 and issue 22 item 1): a crawler's views, whose streams never come, cannot pile up, and a
tab whose context was evicted still works once its stream comes (revived from its signed id)."""

from __future__ import annotations

import gc

import pytest

from pyvia import App, Context
from pyvia.errors import ConfigError
from pyvia.lifecycle import State
from pyvia.memory import CONTEXTS_PER_TRIM, FreedMemory
from pyvia.testing import Tab, TestClient


def counter_app(**options: object) -> App:
    app = App(**options)  # type: ignore[arg-type]

    @app.page("/")
    def page(c: Context) -> None:
        count = c.signal(0, "count")

        @c.action
        def inc() -> None:
            count.value += 1
            c.sync()

        c.view(lambda: f'<p id="count">{count.value}</p>')

    return app


def test_views_whose_stream_never_comes_are_capped_oldest_first() -> None:
    app = counter_app(max_waiting_contexts=3)
    with TestClient(app) as client:
        tabs = [Tab(client, "/", client.get("/")) for _ in range(5)]
        assert len(app.contexts) == 3  # the two oldest were destroyed
        assert [t.id in app.contexts for t in tabs] == [False, False, True, True, True]
        assert app.evicted_waiting == 2
        scrape = client.get("/metrics").body.decode()
        assert "\npyvia_tabs_waiting 3\n" in scrape and "\npyvia_tabs_waiting_evicted_total 2\n" in scrape
        tabs[4].connect()  # connected: no longer waiting, so it never counts against the cap
        for _ in range(3):
            client.get("/")
        assert tabs[4].id in app.contexts and tabs[2].id not in app.contexts


def test_an_evicted_tab_revives_when_its_stream_comes_after_all() -> None:
    app = counter_app(max_waiting_contexts=1)
    with TestClient(app) as client:
        first = Tab(client, "/", client.get("/"))
        client.get("/")  # evicts the first page's context
        assert first.id not in app.contexts
        first.connect()
        assert first.is_connected and first.id in app.contexts
        first.action("inc")
        assert '<p id="count">1</p>' in first.html


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_max_waiting_contexts_must_be_a_whole_number_of_at_least_one(bad: object) -> None:
    with pytest.raises(ConfigError, match="max_waiting_contexts"):
        App(max_waiting_contexts=bad)  # type: ignore[arg-type]


def test_a_burst_of_views_that_never_connect_gives_its_memory_back() -> None:
    # Issue 22 item 3: what a crawler's burst built goes back to the OS once its contexts are gone
    # (malloc_trim, glibc as in CI), and a handful of expired tabs never pays for a trim.
    app = counter_app(max_waiting_contexts=100_000)
    with TestClient(app) as client:
        freed = app.runtime.registry.freed_memory
        assert freed.is_active
        for _ in range(10):
            client.get("/")
        client.clock.advance(app.config.connect_timeout + 10)
        assert not app.contexts and freed.trims == 0  # ten contexts: not worth a trim
        for _ in range(CONTEXTS_PER_TRIM):
            client.get("/")
        client.clock.advance(app.config.connect_timeout + 10)
        assert not app.contexts and freed.trims == 1 and freed.collections == 0
        client.clock.advance(60)
        assert freed.trims == 2 and freed.collections == 1  # the burst is over: collected and trimmed, once
        client.clock.advance(60)
        assert freed.trims == 2  # nothing freed since


def test_freed_memory_is_trimmed_only_after_frees_and_not_too_often() -> None:
    freed = FreedMemory(min_interval=5.0)
    assert freed.is_active  # Linux with glibc, as in CI and production
    assert freed.fix_mmap_threshold()
    assert not freed.trim(0, now=100.0)  # nothing freed yet
    assert freed.trim(3, now=100.0)
    assert not freed.trim(3, now=200.0)  # nothing new
    assert not freed.trim(4, now=104.0)  # too soon
    assert freed.trim(4, now=105.0)
    assert freed.trims == 2
    off = FreedMemory(enabled=False)
    assert not off.is_active and not off.fix_mmap_threshold() and not off.trim(1, now=0.0)


def test_once_a_burst_of_destroyed_contexts_is_over_one_full_collection_empties_the_free_lists() -> None:
    """Not during the burst (its walk over every live object stalls the loop), once after it."""
    full: list[int] = []

    def watch(phase: str, info: dict[str, int]) -> None:
        if phase == "stop" and info["generation"] == 2:
            full.append(1)

    freed = FreedMemory(quiet=10.0)
    gc.callbacks.append(watch)
    try:
        assert not freed.after_burst(0, now=0.0) and not full  # no burst yet
        for second, thousands in enumerate([1, 2, 3, 4]):  # a thousand more destroyed each second
            assert not freed.after_burst(thousands, now=float(second))
        assert not freed.after_burst(4, now=12.0) and not full  # quiet for 9 s only
        assert freed.after_burst(4, now=13.5) and len(full) == 1 and freed.collections == 1
        assert not freed.after_burst(4, now=60.0) and len(full) == 1  # once per burst
    finally:
        gc.callbacks.remove(watch)


def test_a_burst_of_views_leaves_no_graves_and_each_of_its_tabs_still_revives() -> None:
    # Issue 22 item 3: every destroyed tab kept a grave for the 10-minute revival window, so a
    # crawler's burst held its memory for ten minutes. A pristine view leaves none: its signed id
    # is dated, and its page's snapshot rebuilds it exactly.
    app = counter_app(max_waiting_contexts=5)
    with TestClient(app) as client:
        client.clock.advance(app.config.revival_window + 60)  # the process outlived the window
        kept = Tab(client, "/", client.get("/"))
        kept.connect()
        kept.action("inc")
        kept.disconnect()
        first = Tab(client, "/", client.get("/"))
        for _ in range(50):
            client.get("/")
        client.clock.advance(app.config.reconnect_timeout + app.config.cleanup_delay + 10)
        graveyard = app.runtime.revival.graveyard
        assert not app.contexts and list(graveyard) == [kept.id]  # the used tab only
        first.connect()  # from its page's signed id and snapshot
        assert first.is_connected
        first.action("inc")
        assert '<p id="count">1</p>' in first.html
        kept.connect()
        assert kept.is_connected and '<p id="count">1</p>' in kept.html  # its grave kept its count


def test_a_view_older_than_the_window_with_no_record_reloads_instead_of_reviving() -> None:
    # The id's date decides for a tab with no record here: made longer ago than the revival
    # window, it is too old, as a record past its deadline would be.
    app = counter_app()
    with TestClient(app) as client:
        client.clock.advance(app.config.revival_window + 60)
        late = Tab(client, "/", client.get("/"))
        client.clock.advance(app.config.revival_window + 5)
        assert late.id not in app.contexts and late.id not in app.runtime.revival.graveyard
        late.connect()
        assert not late.is_connected
        assert late.scripts == ["window.location.reload()"]


def test_an_evicted_view_is_freed_at_once_not_at_its_old_deadline() -> None:
    # Issue 21 item 4 / issue 22 item 1: the deadline heap held each evicted context until its
    # connect timeout, so the cap bounded the registry but not the memory (RSS grew ~4 KB a view).
    app = counter_app(max_waiting_contexts=3)
    with TestClient(app) as client:
        for _ in range(1500):
            client.get("/")
        gc.collect()
        alive = [o for o in gc.get_objects() if isinstance(o, Context) and o.app is app]
        assert len(alive) == 3 and all(ctx.state is State.CREATED for ctx in alive)
        assert len(app.runtime.registry.deadlines) < 2 * 3 + 1024
        client.clock.advance(app.config.connect_timeout + 10)
        assert not app.contexts  # the live ones still expire at their deadline
