"""pyvia.ops.metrics: the Prometheus text format, bounded labels, histogram buckets, the monitors."""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Any

import pytest

from pyvia.clock import LoopClock
from pyvia.ops.metrics import (
    CONTENT_TYPE,
    OTHER,
    PyviaMetrics,
    Registry,
    process_rss,
    status_class,
)
from tests.ops.promtext import parse, value


def test_counters_gauges_and_histograms_render_in_the_text_format() -> None:
    r = Registry()
    hits = r.counter("app_hits_total", "Hits.")
    hits.inc()
    hits.inc(2)
    temp = r.gauge("app_temperature", "Temperature.")
    temp.set(21.5)
    temp.dec(0.5)
    h = r.histogram("app_latency_seconds", "Latency.", buckets=(0.1, 1.0))
    for seconds in (0.05, 0.1, 0.5, 3.0):
        h.observe(seconds)
    text = r.render().decode()
    meta, samples = parse(text)
    assert meta == {
        "app_hits_total": ("counter", "Hits."),
        "app_temperature": ("gauge", "Temperature."),
        "app_latency_seconds": ("histogram", "Latency."),
    }
    assert value(samples, "app_hits_total") == 3
    assert value(samples, "app_temperature") == 21
    assert value(samples, "app_latency_seconds_bucket", le="0.1") == 2  # <= is inclusive
    assert value(samples, "app_latency_seconds_bucket", le="1") == 3
    assert value(samples, "app_latency_seconds_bucket", le="+Inf") == 4
    assert value(samples, "app_latency_seconds_count") == 4
    assert value(samples, "app_latency_seconds_sum") == pytest.approx(3.65)
    assert "app_hits_total 3\n" in text and CONTENT_TYPE.startswith("text/plain; version=0.0.4")


def test_label_values_outside_the_declared_set_become_other() -> None:
    r = Registry()
    c = r.counter("req_total", "Requests.", labels={"method": ("GET", "POST")})
    c.labels(method="GET").inc()
    for method in ("PROPFIND", "BREW", "/etc/passwd"):
        c.labels(method=method).inc()
    _, samples = parse(r.render().decode())
    assert value(samples, "req_total", method="GET") == 1
    assert value(samples, "req_total", method=OTHER) == 3
    assert len(samples) == 2


def test_label_values_are_escaped() -> None:
    r = Registry()
    g = r.gauge("odd", "Odd.", labels={"v": ('a"b\\c\nd',)})
    g.labels(v='a"b\\c\nd').set(1)
    text = r.render().decode()
    assert 'odd{v="a\\"b\\\\c\\nd"} 1' in text
    _, samples = parse(text)
    assert value(samples, "odd", v='a"b\\c\nd') == 1


def test_histogram_buckets_with_labels_are_cumulative() -> None:
    r = Registry()
    h = r.histogram("gc_seconds", "GC.", buckets=(0.001, 0.01, 0.1), labels={"generation": ("0", "2")})
    h.labels(generation="0").observe(0.0005)
    h.labels(generation="2").observe(0.05)
    h.labels(generation="2").observe(0.2)
    _, samples = parse(r.render().decode())
    got = [value(samples, "gc_seconds_bucket", generation="2", le=le) for le in ("0.001", "0.01", "0.1", "+Inf")]
    assert got == [0, 0, 1, 2]
    assert value(samples, "gc_seconds_count", generation="0") == 1


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda r: r.counter("bad name_total", "x"), "must match"),
        (lambda r: r.counter("hits", "x"), "must end with _total"),
        (lambda r: r.gauge("g", "x", labels={"le": ("a",)}), "label name 'le'"),
        (lambda r: r.histogram("h", "x", buckets=(1.0, 0.5)), "increasing"),
        (lambda r: r.histogram("h", "x", buckets=()), "not empty"),
    ],
)
def test_bad_declarations_are_refused(make: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make(Registry())


def test_misuse_is_refused() -> None:
    r = Registry()
    c = r.counter("c_total", "C.")
    with pytest.raises(ValueError, match="only goes up"):
        c.inc(-1)
    with pytest.raises(ValueError, match="already registered"):
        r.counter("c_total", "again")
    labelled = r.counter("l_total", "L.", labels={"kind": ("a",)})
    with pytest.raises(ValueError, match=r"use \.labels"):
        labelled.inc()
    with pytest.raises(ValueError, match="takes labels"):
        labelled.labels(sort="a")


def test_set_total_never_goes_down() -> None:
    c = Registry().counter("t_total", "T.")
    c.set_total(10)
    c.set_total(4)
    assert c.value == 10


@pytest.mark.parametrize(
    ("status", "label"), [(200, "2xx"), (304, "3xx"), (429, "4xx"), (503, "5xx"), (99, OTHER), (600, OTHER)]
)
def test_status_classes(status: int, label: str) -> None:
    assert status_class(status) == label


def test_pyvia_metrics_count_requests_frames_and_latency() -> None:
    m = PyviaMetrics()
    m.observe_request("page", 200)
    m.observe_request("page", 200)
    m.observe_request("action", 429)
    m.observe_request("made-up", 200)
    m.observe_request("page", 999)
    m.observe_action(0.003)
    m.frame_sent(100, "zstd")
    m.frame_sent(50, "zstd")
    m.frame_sent(70, "deflate")
    m.frame_held()
    m.observe_flush(0.002)
    m.observe_engine(0.0002)
    meta, samples = parse(m.render().decode())
    assert value(samples, "pyvia_requests_total", kind="page", status="2xx") == 2
    assert value(samples, "pyvia_requests_total", kind="action", status="4xx") == 1
    assert value(samples, "pyvia_requests_total", kind=OTHER, status="2xx") == 1
    assert value(samples, "pyvia_requests_total", kind="page", status=OTHER) == 1
    assert value(samples, "pyvia_action_duration_seconds_bucket", le="0.005") == 1
    assert value(samples, "pyvia_stream_frames_sent_total", coding="zstd") == 2
    assert value(samples, "pyvia_stream_bytes_sent_total", coding="zstd") == 150
    assert value(samples, "pyvia_stream_bytes_sent_total", coding=OTHER) == 70
    assert value(samples, "pyvia_stream_frames_held_total") == 1
    assert value(samples, "pyvia_broadcast_flush_duration_seconds_count") == 1
    assert value(samples, "pyvia_engine_round_trip_seconds_count") == 1
    import pyvia

    assert value(samples, "pyvia_build_info", version=pyvia.__version__) == 1
    assert meta["pyvia_event_loop_lag_seconds"][0] == "histogram"


def test_gc_pauses_are_timed_by_generation() -> None:
    m = PyviaMetrics()
    m.gc_monitor.install()
    try:
        gc.collect()
        gc.collect(0)
    finally:
        m.gc_monitor.uninstall()
    assert m.gc_monitor._callback not in gc.callbacks
    _, samples = parse(m.render().decode())
    assert value(samples, "pyvia_gc_pause_seconds_count", generation="2") >= 1
    assert value(samples, "pyvia_gc_pause_seconds_count", generation="0") >= 1


class StepClock:
    """A clock whose time the test sets, with one pending timer."""

    def __init__(self) -> None:
        self.t = 100.0
        self.pending: list[Any] = []

    def now(self) -> float:
        return self.t

    def call_later(self, delay: float, callback: Any, *args: Any) -> Any:
        self.pending.append(callback)

        class Handle:
            def cancel(inner) -> None:
                if callback in self.pending:
                    self.pending.remove(callback)

        return Handle()


def test_loop_lag_is_how_late_the_250_ms_check_ran() -> None:
    m = PyviaMetrics()
    clock = StepClock()
    m.lag_monitor.start(clock)
    clock.t += 0.25  # on time
    clock.pending.pop()()
    clock.t += 0.40  # 150 ms late
    clock.pending.pop()()
    assert m.lag_monitor.running
    m.lag_monitor.stop()
    assert not m.lag_monitor.running and clock.pending == []
    _, samples = parse(m.render().decode())
    assert value(samples, "pyvia_event_loop_lag_seconds_count") == 2
    assert value(samples, "pyvia_event_loop_lag_seconds_bucket", le="0.1") == 1
    assert value(samples, "pyvia_event_loop_lag_seconds_bucket", le="0.25") == 2
    assert value(samples, "pyvia_event_loop_lag_last_seconds") == pytest.approx(0.15)


def test_loop_lag_on_a_real_loop_sees_a_blocking_call() -> None:
    m = PyviaMetrics()

    async def main() -> None:
        m.lag_monitor.start(LoopClock(asyncio.get_running_loop()))
        await asyncio.sleep(0.05)
        time.sleep(0.6)  # blocks the loop past the next check (due on the 250 ms grid: within 0.375 s)
        await asyncio.sleep(0.05)
        m.lag_monitor.stop()

    asyncio.run(main())
    assert m.loop_lag_last.value >= 0.15


def test_process_rss() -> None:
    rss = process_rss()
    assert rss is not None and rss > 10 << 20
    assert process_rss("/nonexistent/statm") is None
