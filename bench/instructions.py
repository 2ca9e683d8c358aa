"""``python -m bench.instructions``: CPU instructions per page view and per action, counted.

Wall-clock figures on a shared 2-core machine drift; instruction counts do not. This driver runs
``examples/counter.py`` in-process through the app's core (``App.handle``, no sockets, the test
client's manual clock): it opens one tab with the test client, records the requests the tab made
(its page view with the session cookie, one click on ``+``), warms up, then replays N fresh copies
of the page view, and N of the click on the tab whose stream is open. The measured loop runs
inside one ``operator.call()``, which nothing else calls, so ``valgrind --tool=callgrind
--collect-atstart=no --toggle-collect=_operator_call`` counts the instructions of exactly those N requests (building the
requests and their bodies happens before, outside it).

::

    python -m bench.instructions                    # both counts, under callgrind, this checkout
    python -m bench.instructions --src ../other/src # another checkout's pyvia (and its examples/)
    python -m bench.instructions --keep out/        # keep the callgrind files for callgrind_annotate
    python -m bench.instructions --wall             # no valgrind: µs per request, perf_counter
    python -m bench.instructions --kind doc         # the ~20 KB documentation page of bench/peer_apps

What a page view does here is what a crawler's does (``bench/pages.py``): ``GET /`` with its
session cookie, no ``Accept-Encoding``, a context left waiting for a stream that never comes. An
action is what the browser posts on a click: the body the test client's tab builds (the context id
and the signals the page sends), with ``count`` kept current where a version sends it, so every
click changes the count and sends its signals patch to the tab's open stream (its sink paused, so
the test client parses nothing).
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import operator
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["main"]

#: ``doc``: the page view of ``bench/peer_apps``' documentation page (``/doc``, about 20 KB).
#: ``sync``: a click whose action re-renders the tab's own ~2.6 KB view (``bench/apps_sync.py``).
KINDS = ("pages", "actions", "doc", "sync")
ROOT = Path(__file__).resolve().parents[1]


def _load_counter(examples: Path) -> Any:
    spec = importlib.util.spec_from_file_location("bench_counter_example", examples / "counter.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.app


class _NullSink:
    """A stream's sink that drops what it is given, as a socket that is always writable."""

    closed = False
    buffered = 0
    is_closed = False
    writes = 0

    def write(self, data: bytes) -> None:
        self.writes += 1

    def close(self) -> None:
        self.closed = self.is_closed = True


def _copy(request: Any, body: bytes | None = None) -> Any:
    """A fresh request like ``request`` (its own headers, state and caches), as a front end makes."""
    from pyvia.http import Headers, Request

    return Request(
        method=request.method,
        path=request.path,
        query_string=request.query_string,
        headers=Headers(list(request.headers)),
        body=request.body if body is None else body,
        client=request.client,
    )


def _inner(kind: str, n: int, warmup: int, wall: bool, profile: bool = False) -> None:
    """Set up the counter and one tab, then run ``n`` requests of ``kind`` inside one ``operator.call``."""
    import orjson

    import pyvia
    from pyvia.testing import TestClient

    if kind == "doc":
        from bench.peer_apps.pyvia_app import app

        path = "/doc"
    elif kind == "sync":
        from bench.apps_sync import app

        path = "/"
    else:
        app = _load_counter(Path(pyvia.__file__).resolve().parents[2] / "examples")
        path = "/"
    client = TestClient(app)
    seen: list[Any] = []
    handle = app.handle

    def recording(request: Any) -> Any:
        seen.append(_copy(request))  # as it came: an answered action lets go of its body
        return handle(request)

    app.handle = recording
    client.get(path)  # the session cookie
    seen.clear()
    tab = client.open(path)
    page, stream = seen[0], seen[-1]
    assert page.method == "GET" and page.path == path, page
    seen.clear()
    if kind == "doc":
        action = page  # a doc page has no action
    else:
        tab.action("increment")
        action = seen[0]
        assert action.method == "POST", action
    app.handle = handle
    # The tab's stream again, on a sink that keeps nothing: the test client parses no frame.
    tab.disconnect()
    opened = handle(_copy(stream))
    assert not inspect.isawaitable(opened) and opened.status == 200 and hasattr(opened, "open"), opened
    sink = _NullSink()
    opened.open(sink)
    run_due = client.clock.run_due
    run_due()

    clicks = kind in ("actions", "sync")
    payload = orjson.loads(action.body) if clicks else {}
    count = app.contexts[tab.id]._signals["count"].value if clicks else 0  # type: ignore[attr-defined]

    def actions(k: int) -> list[Any]:
        nonlocal count
        out = []
        for _ in range(k):
            if "count" in payload:  # a version whose browser sends the count: the value it has seen
                payload["count"] = count
            out.append(_copy(action, orjson.dumps(payload)))
            count += 1
        return out

    def make(k: int) -> list[Any]:
        return actions(k) if clicks else [_copy(page) for _ in range(k)]

    loop = client.loop

    def step(request: Any) -> None:
        result = handle(request)
        if inspect.isawaitable(result):
            result = loop.run_until_complete(result)
        if result.status != 200:
            raise SystemExit(f"{kind}: {request.method} {request.path} answered {result.status}")
        run_due()

    for request in make(warmup):
        step(request)
    requests = make(n)

    def measured() -> None:
        for request in requests:
            step(request)

    if profile:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.runcall(measured)
        stats = pstats.Stats(profiler)
        stats.sort_stats("tottime").print_stats(40)
        stats.sort_stats("cumulative").print_stats(60)
        return
    started = time.perf_counter()
    operator.call(measured)  # what callgrind counts (--toggle-collect=_operator_call): nothing else calls it
    elapsed = time.perf_counter() - started
    if clicks:
        final = app.contexts[tab.id]._signals["count"].value  # type: ignore[attr-defined]
        if final != count or sink.writes < n:
            raise SystemExit(f"actions: the count is {final}, expected {count}; {sink.writes} frames sent")
    if wall:
        print(
            f"{kind}: {elapsed / n * 1e6:.1f} µs per request (n={n}, perf_counter, in-process, "
            f"{Path(pyvia.__file__).parent})"
        )
    client.close()


def _callgrind_total(path: Path) -> int:
    for line in path.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise SystemExit(f"{path}: no totals line")


def _count(kind: str, args: argparse.Namespace, out_dir: Path) -> float:
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit("valgrind not found (apt-get install valgrind)")
    out = out_dir / f"callgrind.{kind}.out"
    env = dict(os.environ, PYTHONHASHSEED="0")
    env["PYTHONPATH"] = os.pathsep.join([str(Path(args.src).resolve()), str(ROOT), env.get("PYTHONPATH", "")])
    command = [
        valgrind,
        "--tool=callgrind",
        "--collect-atstart=no",
        "--toggle-collect=_operator_call",
        f"--callgrind-out-file={out}",
        sys.executable,
        "-m",
        "bench.instructions",
        "--inner",
        kind,
        "-n",
        str(args.n),
        "--warmup",
        str(args.warmup),
    ]
    done = subprocess.run(command, env=env, cwd=str(ROOT), capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{kind}: callgrind run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return _callgrind_total(out) / args.n


def _describe(src: Path) -> str:
    repo = src.resolve().parent
    try:
        rev = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--", "src"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return str(repo)
    return f"{rev}{' (modified)' if dirty else ''}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.instructions", description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", default=str(ROOT / "src"), help="the src/ directory whose pyvia is measured")
    parser.add_argument("-n", type=int, default=2000, help="requests of each kind measured (default 2000)")
    parser.add_argument("--warmup", type=int, default=200, help="requests of each kind before (default 200)")
    parser.add_argument(
        "--kind", choices=KINDS, action="append", help="only this kind (repeatable; default pages and actions)"
    )
    parser.add_argument("--keep", metavar="DIR", help="keep the callgrind output files in DIR")
    parser.add_argument("--wall", action="store_true", help="no valgrind: time the loop with perf_counter")
    parser.add_argument("--profile", action="store_true", help="no valgrind: cProfile the loop (calls per function)")
    parser.add_argument("--inner", choices=KINDS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.inner:
        _inner(args.inner, args.n, args.warmup, wall=False)
        return
    kinds = args.kind or ["pages", "actions"]
    if args.wall or args.profile:
        env_src = str(Path(args.src).resolve())
        for kind in kinds:
            subprocess.run(
                [
                    sys.executable,
                    "-c",
                    "import sys; sys.path[:0] = sys.argv[1:3]; "
                    "from bench.instructions import _inner; "
                    f"_inner({kind!r}, {args.n}, {args.warmup}, wall=True, profile={args.profile})",
                    env_src,
                    str(ROOT),
                ],
                check=True,
                cwd=str(ROOT),
                env=dict(os.environ, PYTHONHASHSEED="0"),
            )
        return
    keep = Path(args.keep) if args.keep else None
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        out_dir = keep or Path(tmp)
        label = _describe(Path(args.src))
        for kind in kinds:
            per = _count(kind, args, out_dir)
            noun = {"pages": "page view", "actions": "action", "doc": "doc page view", "sync": "action with its view"}[
                kind
            ]
            print(f"{label}: {per:,.0f} instructions per {noun} (n={args.n}, callgrind Ir, PYTHONHASHSEED=0)")


if __name__ == "__main__":
    main()
