"""Apps served by the fan-out benchmarks (``bench.broadcast``, ``bench.gol_session``,
``bench.static_css``, ``bench.asgi_compare``). Each is an ordinary pyvia App; what a benchmark
needs to see inside the server goes through plain HTTP routes of the app itself, never through
changes to the framework:

* ``POST /bump`` increments the shared signal ``n`` of ``route:/`` (a broadcast, exactly what an
  action of any tab would cause) and answers the server's ``perf_counter_ns`` at that moment.
  ``?flush=1`` flushes at once inside the request and adds the flush's wall and CPU time
  (``time.process_time``: the server is one thread), so a broadcast can be timed server-side.
* ``GET /stats`` answers the broadcaster's counters, the last flush's start and duration, the
  process CPU time, tab counts and the stream-encoder budget.
* ``GET /mem`` answers glibc's ``mallinfo2`` (bytes malloc'd and mmapped) and RSS; ``POST /trim``
  calls ``malloc_trim(0)`` (to tell memory the allocator keeps from memory still held).

Settings come from the environment so that one module serves every variant (the harness sets
them before starting the server): ``BENCH_VIEW_BYTES``, ``BENCH_BROADCAST_TICK``,
``BENCH_BROADCAST_SETTLE`` (seconds; 0 is the plain tick policy), ``BENCH_IDLE_RELEASE``,
``BENCH_GOL_MODE`` (``full`` | ``diff``), ``BENCH_GOL_RESEED``, ``BENCH_STATIC_DIR``,
``BENCH_ZSTD_SEARCH`` (``level``: the zstd level's own search instead of pyvia's ``STREAM_ZSTD_SEARCH``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import random
import time
from collections import deque
from pathlib import Path
from typing import Any

from examples.counter import app as counter_app
from examples.game_of_life import SIZE, new_board, step

from pyvia import App, Context, Scope, protocol
from pyvia.asgi import asgi
from pyvia.broadcast import Broadcaster
from pyvia.http import Request
from pyvia.scopes import SharedSignal

__all__ = ["app", "broadcast_asgi", "counter_asgi", "gol", "static"]

# --- introspection routes shared by every app ------------------------------------------------------

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


_libc.mallinfo2.restype = _MallInfo2


def _rss_kb() -> int:
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith("Rss:"):
                return int(line.split()[1])
    return 0


_FLUSH_LOG: deque[tuple[float, float, float, int, int]] = deque(maxlen=4096)


class _TimedBroadcaster(Broadcaster):
    """The framework's broadcaster, unchanged, with each piece of flush work that wrote to tabs
    logged as (perf_counter at start, at end, process CPU seconds, tabs written, flush number): a
    whole flush, or one slice of a flush written slice by slice (``broadcast.py``, the settle
    rule; its slices share the flush number). The loop's own clock has millisecond resolution
    under uvloop, too coarse to place a flush against the client's reads."""

    __slots__ = ()

    def _flush(self, *, force: bool, may_cut: bool) -> int:
        t0, c0, number = time.perf_counter(), time.process_time(), self.flushes
        written = super()._flush(force=force, may_cut=may_cut)
        if written:
            _FLUSH_LOG.append((t0, time.perf_counter(), time.process_time() - c0, written, number))
        return written

    def _next_slice(self) -> None:
        t0, c0, before, number = time.perf_counter(), time.process_time(), self.frames_sent, self.flushes
        super()._next_slice()
        if self.frames_sent > before:
            _FLUSH_LOG.append((t0, time.perf_counter(), time.process_time() - c0, self.frames_sent - before, number))


def _add_probes(target: App) -> None:
    # same slots, so the class can be swapped: only the flush entry points are wrapped
    target.broadcaster.__class__ = _TimedBroadcaster
    target.scopes.on_change = target.broadcaster.mark  # the registry holds the bound method

    @target.route("GET", "/stats")
    def stats(request: Request) -> dict[str, Any]:
        b = target.broadcaster
        since = float(request.query.get("since", "0"))
        return {
            "flushes": b.flushes,
            "tab_frames": b.frames_sent,
            "cut_short": b.cut_short,
            "last_flush_start": b._last_start,
            "last_flush_s": b._last_duration,
            "cpu_s": time.process_time(),
            "t_ns": time.perf_counter_ns(),
            "flush_log": [f for f in _FLUSH_LOG if f[0] >= since],
            "contexts": len(target.contexts),
            "connected": len(target.connected),
            "encoders": target.compression.budget.stats(),
        }

    @target.route("GET", "/mem")
    def mem(request: Request) -> dict[str, Any]:
        info = _libc.mallinfo2()
        return {
            "heap_in_use": info.uordblks + info.hblkhd,
            "mmapped": info.hblkhd,
            "arena": info.arena,
            "free_in_arena": info.fordblks,
            "rss_kb": _rss_kb(),
            "encoders": target.compression.budget.stats(),
        }

    @target.route("POST", "/trim")
    def trim(request: Request) -> dict[str, Any]:
        _libc.malloc_trim(0)
        return {"rss_kb": _rss_kb()}


# --- broadcast: a 300-byte shared view and one shared signal ---------------------------------------

VIEW_BYTES = int(os.environ.get("BENCH_VIEW_BYTES", "300"))

app = App(
    title="broadcast bench",
    action_rate=0,
    broadcast_tick=float(os.environ.get("BENCH_BROADCAST_TICK", "0.025")),
    broadcast_settle=float(os.environ.get("BENCH_BROADCAST_SETTLE", "0.002")),
    shared_frames_min_tabs=int(os.environ.get("BENCH_SHARED_MIN_TABS", "16")),
)
_n = app.signal(0, "n", scope=Scope.route("/"))


def _view_markup(value: int) -> str:
    head = f'<section id="board" data-n="{value}"><h2>Visitors</h2><p>Count <b id="nv">{value}</b></p><p>'
    tail = "</p></section>"
    pad = max(0, VIEW_BYTES - len(head) - len(tail))
    return head + ("lorem ipsum dolor sit amet " * (pad // 27 + 1))[:pad] + tail


@app.page("/")
def broadcast_page(c: Context) -> None:
    c.scope(Scope.ROUTE)
    n = c.signal(0, "n", scope=Scope.ROUTE)
    assert isinstance(n, SharedSignal)

    @c.action
    def bump() -> None:
        n.increment()

    c.view(lambda: _view_markup(n.value), share_render=True)


@app.route("POST", "/bump")
def bump_route(request: Request) -> dict[str, Any]:
    t_ns = time.perf_counter_ns()
    value = _n.increment()
    out: dict[str, Any] = {
        "t_ns": t_ns,
        "n": value,
        "flushes": app.broadcaster.flushes,
        "last_flush_s": app.broadcaster._last_duration,
    }
    if request.query.get("flush"):
        cpu0, wall0 = time.process_time(), time.perf_counter()
        out["written"] = app.flush_broadcasts()
        out["flush_wall_s"] = time.perf_counter() - wall0
        out["flush_cpu_s"] = time.process_time() - cpu0
    return out


_add_probes(app)

# --- Game of Life: the example's board, rendered whole (or patched cell by cell) -------------------

GOL_MODE = os.environ.get("BENCH_GOL_MODE", "full")
GOL_RESEED = int(os.environ.get("BENCH_GOL_RESEED", "20"))
_STYLE = """<style>
  #board { display: grid; grid-template-columns: repeat(50, 12px); gap: 1px; width: max-content; }
  #board div { width: 12px; height: 12px; background: #eee; cursor: pointer; }
  #board div.on { background: #222; }
</style>"""

gol = App(
    title="Game of Life",
    head=[_STYLE],
    action_rate=0,
    encoder_idle_release=float(os.environ.get("BENCH_IDLE_RELEASE", "60")),
    shared_frames_min_tabs=int(os.environ.get("BENCH_SHARED_MIN_TABS", "16")),
)
if os.environ.get("BENCH_ZSTD_SEARCH") == "level":  # A/B against pyvia's default search
    gol.compression.stream_zstd_search = None
gol.global_state["board"] = new_board(seed=1)
gol.global_state["paused"] = False
_generation = gol.signal(0, "generation", scope=Scope.route("/"))
_rng = random.Random(7)
_changed = {"cells": 0, "generations": 0}


def _cell(i: int, alive: bool) -> str:
    if GOL_MODE == "diff":  # each cell addressable by id, so a patch can morph just the changed ones
        return f'<div id="c{i}" class="on"></div>' if alive else f'<div id="c{i}"></div>'
    return '<div class="on"></div>' if alive else "<div></div>"


def _render_board(toggle_url: str) -> str:
    # the example's markup: one click handler for the whole board
    on_click = (
        "evt.target.parentElement.id == 'board' && "
        f"@post('{toggle_url}?cell=' + [...evt.target.parentElement.children].indexOf(evt.target), "
        "{requestCancellation: 'disabled'})"
    )
    cells = "".join(_cell(i, alive) for i, alive in enumerate(gol.global_state["board"]))
    return f'<div id="board" data-on:click="{on_click}">{cells}</div>'


def _gol_tick() -> None:
    if gol.global_state["paused"] or gol.count_clients(Scope.route("/")) == 0:
        return
    old = gol.global_state["board"]
    new = step(old)
    for _ in range(GOL_RESEED):  # keep the board busy: it never settles into still lifes
        i = _rng.randrange(SIZE * SIZE)
        new[i] = not new[i]
    gol.global_state["board"] = new
    changed = [i for i in range(SIZE * SIZE) if new[i] != old[i]]
    _changed["cells"] += len(changed)
    _changed["generations"] += 1
    if GOL_MODE == "diff":
        # Only the changed cells, as one patch-elements event (morphed by id) plus the generation
        # signal, the same bytes to every tab in one write each. There is no public "send these
        # bytes to a scope" yet, so this reaches the tab's outbound stream directly.
        _generation._value += 1
        event = protocol.patch_elements("".join(_cell(i, new[i]) for i in changed)) + protocol.patch_signals(
            {_generation.id: _generation._value}
        )
        now = gol.now()
        for ctx in gol.local_clients(Scope.route("/")):
            ctx.stream.send(event, None, now)
    else:
        _generation.increment()


gol.set_interval(_gol_tick, 0.2)


@gol.page("/")
def life(c: Context) -> None:
    c.scope(Scope.ROUTE)
    gen = c.signal(0, "generation", scope=Scope.ROUTE)

    @c.action
    def toggle() -> None:
        try:
            cell = int(c.input("cell", "-1"))
        except ValueError:
            return
        board = gol.global_state["board"]
        if 0 <= cell < len(board):
            board[cell] = not board[cell]
            c.broadcast()

    c.view(
        lambda: (
            f"""
<main id="life">
  <h1>Game of Life</h1>
  <p>Generation <strong id="gen" data-text="{gen.ref()}">{gen.value}</strong>,
     {gol.count_clients(c.primary_scope)} watching.</p>
  {_render_board(toggle.url)}
</main>"""
        ),
        share_render=True,
    )


@gol.route("POST", "/pause")
def pause(request: Request) -> dict[str, Any]:
    gol.global_state["paused"] = request.query.get("on", "1") == "1"
    return {"paused": gol.global_state["paused"], "generation": _generation._value}


@gol.route("GET", "/gol")
def gol_stats(request: Request) -> dict[str, Any]:
    return {
        "mode": GOL_MODE,
        "reseed": GOL_RESEED,
        "generation": _generation._value,
        **_changed,
        "cpu_s": time.process_time(),
    }


_add_probes(gol)

# --- static files ---------------------------------------------------------------------------------

_static_dir = os.environ.get("BENCH_STATIC_DIR")
static = App(title="static bench", static_dir=_static_dir if _static_dir and Path(_static_dir).is_dir() else None)


@static.page("/")
def static_page(c: Context) -> None:
    c.view(lambda: '<main><link rel="stylesheet" href="/site.css"><p>static bench</p></main>')


_add_probes(static)

# --- ASGI wrappers (one per App; each server process imports the module anew) ----------------------

broadcast_asgi = asgi(app)
counter_asgi = asgi(counter_app)
