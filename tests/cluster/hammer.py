"""A writer process for the no-lost-update tests.

``python -m tests.cluster.hammer URL PREFIX OP COUNT NAME`` connects, prints ``ready``, waits for
a message on ``go`` (so all writers start together), then runs ``COUNT`` increments of
``race/count`` or appends of ``NAME-i`` to the JSON list ``race/list``, and prints ``done``.
"""

from __future__ import annotations

import asyncio
import sys

import orjson
import uvloop

from pyvia.cluster import create_engine


async def main(url: str, prefix: str, op: str, count: int, name: str) -> None:
    engine = create_engine(url, prefix=prefix)
    await engine.connect()
    go = asyncio.Event()
    await engine.subscribe("go", lambda subject, payload: go.set())
    print("ready", flush=True)
    await asyncio.wait_for(go.wait(), 20)
    for i in range(count):
        if op == "increment":
            await engine.increment("race", "count")
        else:
            item = f"{name}-{i}"
            await engine.mutate("race", "list", lambda raw, item=item: orjson.dumps([*orjson.loads(raw), item]), b"[]")
    print("done", flush=True)
    await engine.close()


if __name__ == "__main__":
    url, prefix, op, count, name = sys.argv[1:6]
    uvloop.run(main(url, prefix, op, int(count), name))
