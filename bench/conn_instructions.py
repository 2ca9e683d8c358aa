"""``python -m bench.conn_instructions``: CPU instructions per request in the native server's connection.

:mod:`bench.instructions` counts the app's core (``App.handle``) and no server; this counts the
other half: one :class:`pyvia.server.connection.HttpProtocol` on a transport that keeps nothing,
fed N keep-alive ``GET`` requests (one read each) answered by an app that returns a ready
``Response``, so what is counted is the server's parsing, checks, state moves and response
encoding. The measured loop runs inside one ``operator.call()``, so ``valgrind --tool=callgrind
--collect-atstart=no --toggle-collect=_operator_call`` counts exactly those N requests.

::

    python -m bench.conn_instructions                    # under callgrind, this checkout
    python -m bench.conn_instructions --src ../other/src # another checkout's pyvia
    python -m bench.conn_instructions --wall             # no valgrind: µs per request
"""

from __future__ import annotations

import argparse
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

ROOT = Path(__file__).resolve().parents[1]

REQUEST = (
    b"GET /items?page=2 HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: bench\r\nAccept: */*\r\n"
    b"Accept-Language: en\r\nCookie: s=0123456789abcdef\r\n\r\n"
)


class _Transport:
    """A transport that drops what it is written and is always writable."""

    written = 0

    def write(self, data: bytes) -> None:
        assert data.startswith(b"HTTP/1.1 200 "), data[:40]
        self.written += 1

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return False

    def can_write_eof(self) -> bool:
        return True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass

    def write_eof(self) -> None:
        pass


class _Loop:
    def time(self) -> float:
        return 1000.0


def _child(n: int, warmup: int, wall: bool) -> None:
    from pyvia.http import Response
    from pyvia.server.connection import ConnectionRegistry, HttpProtocol
    from pyvia.server.http import ServerLimits

    response = Response.text("ok")

    class App:
        def handle(self, request: Any) -> Response:
            return response

    registry = ConnectionRegistry(_Loop())  # type: ignore[arg-type]
    protocol = HttpProtocol(App(), registry, ServerLimits())  # type: ignore[arg-type]
    transport = _Transport()
    protocol.connection_made(transport)  # type: ignore[arg-type]
    feed = protocol.data_received
    for _ in range(warmup):
        feed(REQUEST)

    def run() -> None:
        for _ in range(n):
            feed(REQUEST)

    start = time.perf_counter()
    operator.call(run)
    elapsed = time.perf_counter() - start
    assert transport.written == n + warmup, transport.written
    if wall:
        print(f"{elapsed / n * 1e6:.2f} µs per request ({n} requests)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=2000, help="measured requests (default 2000)")
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--src", type=Path, default=ROOT / "src", help="the pyvia src/ to measure")
    parser.add_argument("--wall", action="store_true", help="no valgrind: time with perf_counter")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        sys.path.insert(0, str(args.src))
        _child(args.n, args.warmup, args.wall)
        return 0
    child = [sys.executable, "-m", "bench.conn_instructions", "--child", "-n", str(args.n)]
    child += ["--warmup", str(args.warmup), "--src", str(args.src.resolve())]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if args.wall:
        return subprocess.call([*child, "--wall"], env=env)
    if shutil.which("valgrind") is None:
        print("valgrind not found (or use --wall)", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        subprocess.check_call(
            [
                "valgrind",
                "--tool=callgrind",
                "--collect-atstart=no",
                "--toggle-collect=_operator_call",
                f"--callgrind-out-file={out}",
                *child,
            ],
            env=env,
            stderr=subprocess.DEVNULL,
        )
        total = 0
        for line in out.read_text().splitlines():
            if line.startswith("summary:"):
                total = int(line.split()[1])
    print(f"pyvia from {args.src}: {total / args.n:,.0f} instructions per request ({args.n} requests)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
