"""A group of fake gossip peers on inproc sockets, for the round and gradient
mixer tests: each knows the others and serves its socket until the block ends."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import zmq.asyncio

from verl_zmq.comm.transport import Transport


@contextlib.asynccontextmanager
async def peer_group(make: Callable[[Transport, str, int], object], n: int):
    """`n` peers `make(transport, "peer-<i>", i)`; each must have `id`, `peers`, and
    `serve()`."""
    ctx = zmq.asyncio.Context()
    t = Transport(ctx, inproc=True)
    peers = [make(t, f"peer-{i}", i) for i in range(n)]
    for p in peers:
        p.peers = {q.id: q for q in peers if q is not p}
    tasks = [asyncio.create_task(p.serve()) for p in peers]
    try:
        yield peers
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        t.close()
        ctx.term()
