"""``python -m bench.write_floor --tabs N``: what writing one event to N open loopback connections
costs with nothing of pyvia around it, the floor under ``bench.scale``'s broadcast (issue 22,
target 6).

The writer (pinned to CPU 1, as ``bench.scale`` pins the server) accepts N connections, then for
``--rounds`` rounds writes the same ``--bytes``-byte frame to every socket in one loop of
``socket.send`` calls: the least a server in Python can do per tab. The reader (a child process
on CPU 0, uvloop, one protocol per connection that only counts bytes, leaner than any client that
decodes events) reports when the last connection received the round's bytes. Printed per round:
the writer's loop (wall; the process's CPU clock; user and kernel apart, at the scheduler's
tick) and the time to the last connection; their medians at the end. On loopback a write also
runs the receiving side's TCP input in the writer's context, so the kernel share is the machine's
cost of delivering, not of Python.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import time

from bench.provenance import print_provenance, provenance

FRAME_BYTES = 410  # a broadcast's event per tab in bench.broadcast (fragment and value)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.write_floor", description=__doc__.split("\n")[0])
    p.add_argument("--tabs", type=int, default=5000, help="connections (default 5000)")
    p.add_argument("--rounds", type=int, default=9, help="rounds measured (default 9, after 2 warm-up rounds)")
    p.add_argument("--bytes", type=int, default=FRAME_BYTES, help=f"bytes per write (default {FRAME_BYTES})")
    p.add_argument("--reader", type=int, default=0, help=argparse.SUPPRESS)  # the child's side: the port
    return p


async def _read(port: int, tabs: int) -> None:
    """The reader: N connections; on ``go SIZE`` waits until each has SIZE more bytes, says when."""
    loop = asyncio.get_running_loop()
    counts = [0] * tabs
    state: dict[str, object] = {"target": 0, "left": 0, "last": 0.0, "done": None}

    class Counter(asyncio.Protocol):
        def __init__(self, i: int) -> None:
            self.i = i

        def data_received(self, data: bytes) -> None:
            i = self.i
            before = counts[i]
            counts[i] = after = before + len(data)
            target = state["target"]
            assert isinstance(target, int)
            if before < target <= after:
                left = state["left"]
                assert isinstance(left, int)
                state["left"] = left - 1
                state["last"] = time.perf_counter()
                done = state["done"]
                if left == 1 and isinstance(done, asyncio.Future) and not done.done():
                    done.set_result(None)

    for i in range(tabs):
        await loop.create_connection(functools.partial(Counter, i), "127.0.0.1", port)
    print(json.dumps({"type": "ready"}), flush=True)
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := (await reader.readline()).decode().split():
        if line[0] != "go":
            break
        done = loop.create_future()
        state.update(target=state["target"] + int(line[1]), left=tabs, done=done)  # type: ignore[operator]
        print(json.dumps({"type": "armed"}), flush=True)
        await asyncio.wait_for(done, 30)
        print(json.dumps({"type": "round", "last": state["last"]}), flush=True)


def _cpu() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.reader:
        import uvloop

        os.sched_setaffinity(0, {0})
        uvloop.run(_read(args.reader, args.tabs))
        return 0
    os.sched_setaffinity(0, {1})
    print_provenance(provenance("write_floor", vars(args), []))
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4096)
    port = listener.getsockname()[1]
    child = subprocess.Popen(
        [sys.executable, "-m", "bench.write_floor", "--reader", str(port), "--tabs", str(args.tabs)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None and child.stdout is not None
    socks: list[socket.socket] = []
    listener.settimeout(60)
    while len(socks) < args.tabs:
        conn, _ = listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.setblocking(False)
        socks.append(conn)
    assert json.loads(child.stdout.readline())["type"] == "ready"
    frame = b"x" * args.bytes
    rows: list[dict[str, float]] = []
    for r in range(-2, args.rounds):
        child.stdin.write(f"go {args.bytes}\n")
        child.stdin.flush()
        assert json.loads(child.stdout.readline())["type"] == "armed"
        time.sleep(0.2)
        u0, s0 = _cpu()
        c0 = time.process_time()
        t0 = time.perf_counter()
        send = socket.socket.send
        for s in socks:
            send(s, frame)
        t1 = time.perf_counter()
        c1 = time.process_time()
        u1, s1 = _cpu()
        last = json.loads(child.stdout.readline())["last"]
        if r < 0:
            continue
        row = {
            "loop_ms": (t1 - t0) * 1e3,
            "cpu_us_per_tab": (c1 - c0) / args.tabs * 1e6,
            "user_us_per_tab": (u1 - u0) / args.tabs * 1e6,
            "kernel_us_per_tab": (s1 - s0) / args.tabs * 1e6,
            "last_tab_ms": (last - t0) * 1e3,
        }
        rows.append(row)
        print(
            f"  round {r + 1}: writes {row['loop_ms']:.1f} ms, CPU {row['cpu_us_per_tab']:.1f} µs a tab (ticks: user "
            f"{row['user_us_per_tab']:.1f} + kernel {row['kernel_us_per_tab']:.1f}); last connection has it after "
            f"{row['last_tab_ms']:.1f} ms",
            flush=True,
        )
    child.stdin.write("quit\n")
    child.stdin.flush()
    child.wait(10)
    for s in socks:
        s.close()
    med = {k: statistics.median(row[k] for row in rows) for k in rows[0]}
    print(
        f"  => {args.tabs:,} connections, {args.bytes} B each: the writes take {med['loop_ms']:.1f} ms, CPU "
        f"{med['cpu_us_per_tab']:.1f} µs a tab (user {med['user_us_per_tab']:.1f} + kernel "
        f"{med['kernel_us_per_tab']:.1f}), the last connection has "
        f"them after {med['last_tab_ms']:.1f} ms (medians of {len(rows)} rounds)",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
