"""SQLite writes per second through ``pyvia.db`` at concurrency 1 to 16 (issue 8): a plateau, never a collapse.

    python -m bench.db_writes [--seconds 3] [--reps 5] [--concurrency 1,4,16]

In one process pinned to CPU 1 (the server's core; the database threads run there too), ``c``
tasks each run write transactions back to back for ``--seconds``: ``BEGIN IMMEDIATE``, read a
counter, write it back plus one, insert a row, ``COMMIT`` (through ``db.transaction()``, so under
the one write permit). Completed transactions are counted, and checked at the end: the counter
must equal the rows and the completed count (no lost update), and no transaction may fail.

``--shape insert`` runs two single-statement writes instead (``INSERT``, then ``UPDATE n = n + 1``),
each its own transaction under the permit: the common shape of an action's write.

``--mode naive`` is the baseline the permit replaces: ``c`` threads, each with its own stdlib
``sqlite3`` connection (WAL, 5 s busy timeout, the driver's default deferred transactions), doing
the same read-then-write. Its failures are counted, not hidden.

One JSON line per repetition goes to ``bench/results/db_writes-<time>.jsonl`` after the provenance.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import tempfile
import threading
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import uvloop

from bench.provenance import print_provenance, provenance
from bench.report import Recorder, fmt, spread
from pyvia.db import connect

SCHEMA = (
    "CREATE TABLE counter (n INTEGER NOT NULL)",
    "CREATE TABLE log (id INTEGER PRIMARY KEY, at REAL NOT NULL)",
    "INSERT INTO counter VALUES (0)",
)


async def pyvia_run(path: Path, concurrency: int, seconds: float, shape: str) -> dict[str, Any]:
    db = connect(f"sqlite:///{path}", pool_size=4)
    db.open()
    try:
        for sql in SCHEMA:
            await db.execute(sql)
        done = 0
        errors: list[str] = []
        stop = time.perf_counter() + seconds

        async def writer() -> None:
            nonlocal done
            while time.perf_counter() < stop:
                try:
                    if shape == "insert":  # one statement, its own transaction
                        await db.execute("INSERT INTO log (at) VALUES ($1)", time.time())
                        await db.execute("UPDATE counter SET n = n + 1")
                    else:
                        async with db.transaction() as tx:
                            n = await tx.fetchval("SELECT n FROM counter")
                            await tx.execute("UPDATE counter SET n = $1", n + 1)
                            await tx.execute("INSERT INTO log (at) VALUES ($1)", time.time())
                    done += 1
                except Exception as exc:
                    errors.append(f"{type(exc).__name__}: {exc}")

        started = time.perf_counter()
        await asyncio.gather(*(writer() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
        counter = await db.fetchval("SELECT n FROM counter")
        rows = await db.fetchval("SELECT count(*) FROM log")
        wait = db.metrics.db_write_wait.unlabelled()  # the permit waits of this run
        return {
            "completed": done,
            "errors": len(errors),
            "first_error": errors[0] if errors else None,
            "elapsed": elapsed,
            "writes_per_s": done / elapsed,
            "counter": counter,
            "rows": rows,
            "consistent": counter == rows == done,
            "mean_permit_wait_ms": 1000 * wait.sum / max(1, wait.count),
        }
    finally:
        await db.close()


def naive_run(path: Path, concurrency: int, seconds: float) -> dict[str, Any]:
    with closing(sqlite3.connect(path)) as setup, setup:
        setup.execute("PRAGMA journal_mode = WAL")
        for sql in SCHEMA:
            setup.execute(sql)
    setup.close()
    done = 0
    errors: list[str] = []
    lock = threading.Lock()
    stop = time.perf_counter() + seconds

    def writer() -> None:
        nonlocal done
        conn = sqlite3.connect(path, timeout=5.0)  # the driver's defaults: deferred BEGIN before a write
        conn.execute("PRAGMA synchronous = NORMAL")
        while time.perf_counter() < stop:
            try:
                with conn:
                    n = conn.execute("SELECT n FROM counter").fetchone()[0]
                    conn.execute("UPDATE counter SET n = ?", (n + 1,))
                    conn.execute("INSERT INTO log (at) VALUES (?)", (time.time(),))
                with lock:
                    done += 1
            except sqlite3.Error as exc:
                with lock:
                    errors.append(f"{type(exc).__name__}: {exc}")
        conn.close()

    threads = [threading.Thread(target=writer) for _ in range(concurrency)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    with closing(sqlite3.connect(path)) as check, check:
        counter = check.execute("SELECT n FROM counter").fetchone()[0]
        rows = check.execute("SELECT count(*) FROM log").fetchone()[0]
    check.close()
    return {
        "completed": done,
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "elapsed": elapsed,
        "writes_per_s": done / elapsed,
        "counter": counter,
        "rows": rows,
        "consistent": counter == rows == done,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--concurrency", default="1,4,16")
    parser.add_argument("--mode", choices=("pyvia", "naive"), default="pyvia")
    parser.add_argument(
        "--shape",
        choices=("tx", "insert"),
        default="tx",
        help="tx: the read-then-write transaction; insert: two single-statement writes "
        "(INSERT, then UPDATE n = n + 1), each its own transaction (pyvia mode only)",
    )
    args = parser.parse_args()
    os.sched_setaffinity(0, {1})  # the server's core: this process plays the server
    record = provenance("db_writes", vars(args), ["in-process, sched_setaffinity {1}"])
    record["server_cpu"] = "sched_setaffinity {1} (in-process)"
    print_provenance(record)
    print(f"#   sqlite {sqlite3.sqlite_version}, mode {args.mode}, shape {args.shape}, load average {os.getloadavg()}")
    recorder = Recorder("db_writes")
    recorder.write(record)
    for c in (int(x) for x in args.concurrency.split(",")):
        reps = []
        for rep in range(args.reps):
            with tempfile.TemporaryDirectory(prefix="pyvia-bench-db-") as folder:
                path = Path(folder) / "bench.db"
                if args.mode == "pyvia":
                    result = uvloop.run(pyvia_run(path, c, args.seconds, args.shape))
                else:
                    result = naive_run(path, c, args.seconds)
            result.update(
                {
                    "type": "rep",
                    "mode": args.mode,
                    "shape": args.shape,
                    "concurrency": c,
                    "rep": rep,
                    "loadavg": os.getloadavg()[0],
                }
            )
            recorder.write(result)
            reps.append(result)
        rate = spread([r["writes_per_s"] for r in reps])
        errors = sum(r["errors"] for r in reps)
        clean = all(r["consistent"] for r in reps)
        print(
            f"c={c:>2}  {fmt(rate, 0)} transactions/s  errors {errors}  "
            f"consistent {clean}  load {reps[-1]['loadavg']:.2f}"
            + (f"  first error: {next(r['first_error'] for r in reps if r['first_error'])}" if errors else "")
        )
    print(f"# {recorder.path}")


if __name__ == "__main__":
    main()
