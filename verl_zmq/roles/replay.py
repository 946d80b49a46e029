"""Replay shard: stores experience and serves it to its group's learner.

PULL takes fragments from any sampler of the group; ROUTER takes the
learner's requests. FIFO mode (on-policy) serves each fragment once, under
credit-based flow control: the learner grants credits, the shard sends one
fragment per credit, so a few are always in flight and the learner never
waits while data exists. Memory is bounded: when full, the shard stops
reading (samplers block on their PUSH high-water mark) or, if the job says
`drop_oldest`, drops and counts the oldest. Imports no torch.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque

import zmq

from .. import wire
from .base import Role, recv, send


class FifoStore:
    """A bounded FIFO of fragments, each served once."""

    def __init__(self, capacity_fragments: int):
        self.capacity = max(1, capacity_fragments)
        self.items: deque[tuple[wire.Fragment, float]] = deque()
        self.dropped = 0

    def __len__(self) -> int:
        return len(self.items)

    @property
    def full(self) -> bool:
        return len(self.items) >= self.capacity

    def put(self, frag: wire.Fragment, drop_oldest: bool) -> None:
        if self.full and drop_oldest:
            self.items.popleft()
            self.dropped += 1
        self.items.append((frag, time.time()))

    def pop(self) -> tuple[wire.Fragment, float]:
        return self.items.popleft()

    def push_front(self, item: tuple[wire.Fragment, float]) -> None:
        self.items.appendleft(item)


def fragment_ok(f: wire.Fragment) -> str:
    """Structural check a shard can make without knowing the env: empty when fine."""
    a = f.arrays
    for k in ("obs", "action", "reward", "terminated", "truncated", "valid"):
        if k not in a:
            return f"missing array {k!r}"
    te = a["reward"].shape
    if len(te) != 2 or te[0] == 0 or te[1] == 0:
        return f"reward has shape {te}, expected [T, E]"
    for k in ("obs", "action", "terminated", "truncated", "valid"):
        if a[k].shape[:2] != te:
            return f"{k} has shape {a[k].shape}, expected [{te[0]}, {te[1]}, ...]"
    return ""


class ReplayRole(Role):
    """One shard of the job's replay: FIFO (on-policy) or uniform/prioritized."""

    name = "replay"

    def __new__(cls, ctx):
        if cls is ReplayRole and ctx.job.replay.mode != "fifo":
            from .replay_offpolicy import OffPolicyReplayRole

            return super().__new__(OffPolicyReplayRole)
        return super().__new__(cls)

    async def setup(self) -> None:
        t = self.ctx.transport
        self.pull, pull_ep = t.bind(zmq.PULL, "fragments", hwm=2)
        self.router, req_ep = t.bind(zmq.ROUTER, "requests", hwm=1000)
        self.router.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.endpoints = {"fragments": pull_ep, "requests": req_ep}
        self.credits: dict[bytes, int] = {}
        self.make_store()
        self.inserts = 0
        self.served = 0
        self.rejected = 0
        self.delay_sum = 0.0
        self.blocked_s = 0.0
        self._rate = (time.monotonic(), 0, 0, 0.0)

    def make_store(self) -> None:
        """What this mode stores: a bounded FIFO of fragments."""
        cap = self.job.replay.capacity // max(1, self.job.fragment_steps)
        self.store = FifoStore(cap)
        self.drop_oldest = self.job.replay.when_full == "drop_oldest"
        self.space = asyncio.Event()
        self.space.set()

    def store_metrics(self) -> dict[str, float]:
        return {"replay/size": len(self.store), "replay/capacity": self.store.capacity,
                "replay/dropped": self.store.dropped}

    async def _serve(self) -> None:
        """Send queued fragments while some learner has credit."""
        while self.store.items:
            ident = next((i for i, c in self.credits.items() if c > 0), None)
            if ident is None:
                return
            item = self.store.pop()
            frag, inserted = item
            msg = wire.Batch(version=frag.version, inserted_t=inserted, sampler=frag.src,
                             arrays=frag.arrays)
            try:
                await send(self.router, msg, self.id, prefix=[ident])
            except zmq.ZMQError:  # that learner is gone: forget its credit, keep the data
                self.credits.pop(ident, None)
                self.store.push_front(item)
                continue
            self.credits[ident] -= 1
            self.served += 1
            self.delay_sum += time.time() - inserted
            if not self.store.full:
                self.space.set()

    async def _ingest(self) -> None:
        while True:
            if self.store.full and not self.drop_oldest:
                self.space.clear()
                t0 = time.monotonic()
                await self.space.wait()  # stop reading: samplers block on their PUSH
                self.blocked_s += time.monotonic() - t0
            msg = await self._next_fragment()
            if msg is None:
                continue
            self.store.put(msg, self.drop_oldest)
            self.inserts += 1
            await self._serve()

    async def _next_fragment(self) -> wire.Fragment | None:
        """One fragment from the PULL socket, or None (counted, logged) when it is bad."""
        _, msg = await recv(self.pull, self.wire_stats, expect=(wire.Fragment,))
        if msg is None:
            return None
        why = fragment_ok(msg)
        if why:
            self.reject_fragment(msg, why)
            return None
        return msg

    def reject_fragment(self, msg: wire.Fragment, why: str) -> None:
        self.rejected += 1
        self.wire_stats.reject(msg.src, wire.WireError(f"bad fragment: {why}"))

    async def _requests(self) -> None:
        while True:
            prefix, msg = await recv(self.router, self.wire_stats, n_prefix=1,
                                     expect=(wire.SampleRequest,))
            if msg is None:
                continue
            ident = prefix[0].bytes
            self.credits[ident] = min(self.credits.get(ident, 0) + max(0, msg.credit), 1000)
            await self._serve()

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._ingest())
            tg.create_task(self._requests())

    def status(self) -> dict[str, float]:
        return {"size": len(self.store)}

    def metrics(self) -> dict[str, float]:
        now = time.monotonic()
        t, ins, srv, dsum = self._rate
        dt = max(now - t, 1e-9)
        self._rate = (now, self.inserts, self.served, self.delay_sum)
        n_served = self.served - srv
        return {**self.store_metrics(),
                "replay/inserts": self.inserts, "replay/served": self.served,
                "replay/inserts_per_s": round((self.inserts - ins) / dt, 2),
                "replay/served_per_s": round(n_served / dt, 2),
                "replay/serve_delay_s": round((self.delay_sum - dsum) / n_served, 4)
                if n_served else 0.0,
                "replay/rejected": self.rejected,
                "replay/blocked_s": round(self.blocked_s, 3)}


ROLE = ReplayRole
