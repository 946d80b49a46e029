"""Replay shard, off-policy modes (uniform, prioritized).

Fragments are unrolled into n-step transitions and stored in a ring; each of the
learner's credits is answered with one sampled batch (with importance weights,
slot indices and their generations) when the replay-ratio limiter allows;
priority updates come back keyed by (index, generation), so an update for a slot
overwritten meanwhile is ignored. Inserts wait (the shard stops reading, so
samplers block) while the limiter says the learner is behind. Imports no torch.
"""

from __future__ import annotations

import asyncio
import time

import zmq

from .. import wire
from ..replay import snapshot
from ..replay.offpolicy import OffPolicyStore
from .base import recv, send
from .replay import ReplayRole


class OffPolicyReplayRole(ReplayRole):
    """A uniform or prioritized replay shard."""

    def make_store(self) -> None:
        self.op = OffPolicyStore(self.job, seed=self.job.experiment.seed + self.ctx.index)
        self.batch_size: dict[bytes, int] = {}
        self.may_insert = asyncio.Event()
        self.may_insert.set()
        self.priority_updates = 0
        self.transitions = 0
        self.snapshot_dir = snapshot.snapshot_dir(self.ctx.run_dir, self.id)
        self._restore()

    # -- snapshots: the buffer survives a restart and a resumed job ---------------

    def _restore(self) -> None:
        t0 = time.monotonic()
        try:
            state = snapshot.read(self.snapshot_dir)
            if state is None:
                return
            self.op.load_state(state)
        except (OSError, ValueError, KeyError) as e:  # unreadable: start empty, say so
            self.log.error("replay_restore_failed", path=str(self.snapshot_dir), error=str(e))
            self.op = OffPolicyStore(self.job, seed=self.job.experiment.seed + self.ctx.index)
            return
        self.transitions = self.op.storage.size
        self.log.info("replay_restored", path=str(self.snapshot_dir),
                      size=self.op.storage.size, env_steps=self.op.env_steps,
                      seconds=round(time.monotonic() - t0, 3))

    async def _snapshot(self) -> None:
        t0 = time.monotonic()
        state = self.op.state()  # copies, taken between two messages: consistent
        path = await asyncio.to_thread(snapshot.write, self.snapshot_dir, state)
        self.log.info("replay_snapshot", path=str(path), size=self.op.storage.size,
                      bytes=path.stat().st_size, seconds=round(time.monotonic() - t0, 3))

    async def _snapshot_loop(self) -> None:
        while True:
            await asyncio.sleep(self.job.replay.snapshot_interval_s)
            if self.op.storage.size:  # an empty buffer has nothing to keep
                await self._snapshot()

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._ingest())
            tg.create_task(self._requests())
            if self.job.replay.snapshot_interval_s > 0:
                tg.create_task(self._snapshot_loop())

    async def teardown(self) -> None:
        if self.op.storage.size:
            await self._snapshot()

    async def _serve(self) -> None:
        lim = self.op.limiter
        for ident in list(self.credits):
            n = self.batch_size.get(ident, 0)
            while self.credits.get(ident, 0) > 0 and n > 0 and lim.can_sample(n):
                msg = wire.Batch(arrays=self.op.sample(n), inserted_t=time.time())
                try:
                    await send(self.router, msg, self.id, prefix=[ident])
                except zmq.ZMQError:  # that learner is gone
                    self.credits.pop(ident, None)
                    break
                self.credits[ident] -= 1
                self.served += 1
        if lim.can_insert(1):
            self.may_insert.set()

    async def _ingest(self) -> None:
        while True:
            msg = await self._next_fragment()
            if msg is None:
                continue
            try:
                tr = self.op.transitions(msg.arrays)
            except (KeyError, ValueError, IndexError, TypeError) as e:
                self.reject_fragment(msg, str(e))
                continue
            n = len(tr["reward"])
            while not self.op.limiter.can_insert(n):  # the learner is behind: wait
                self.may_insert.clear()
                t0 = time.monotonic()
                await self.may_insert.wait()
                self.blocked_s += time.monotonic() - t0
            try:
                self.op.insert(tr, int(msg.arrays["reward"].size))
            except ValueError as e:  # columns that do not match what is stored
                self.reject_fragment(msg, str(e))
                continue
            self.inserts += 1
            self.transitions += n
            await self._serve()

    async def _requests(self) -> None:
        while True:
            prefix, msg = await recv(self.router, self.wire_stats, n_prefix=1,
                                     expect=(wire.SampleRequest, wire.PriorityUpdate))
            if msg is None:
                continue
            ident = prefix[0].bytes
            if isinstance(msg, wire.PriorityUpdate):
                self._priorities(msg)
                continue
            self.credits[ident] = min(self.credits.get(ident, 0) + max(0, msg.credit), 1000)
            if msg.batch_size > 0:
                self.batch_size[ident] = min(msg.batch_size, 65_536)
            await self._serve()

    def _priorities(self, msg: wire.PriorityUpdate) -> None:
        a = msg.arrays
        try:
            idx, gen, pr = a["index"], a["generation"], a["priority"]
            if not (idx.shape == gen.shape == pr.shape and idx.ndim == 1):
                raise ValueError("index, generation and priority differ in shape")
            if idx.dtype.kind not in "iu" or gen.dtype.kind not in "iu" or pr.dtype.kind != "f":
                raise ValueError("bad dtypes")
        except (KeyError, ValueError) as e:
            self.wire_stats.reject(msg.src, wire.WireError(f"bad priority update: {e}"))
            return
        self.priority_updates += self.op.update_priorities(idx, gen, pr)

    def status(self) -> dict[str, float]:
        return {"size": self.op.storage.size}

    def store_metrics(self) -> dict[str, float]:
        s = self.op.storage
        return {"replay/size": s.size, "replay/capacity": s.capacity,
                "replay/transitions": self.transitions, "replay/env_steps": self.op.env_steps,
                "replay/sampled": self.op.limiter.sampled,
                "replay/priority_updates": self.priority_updates,
                "replay/stale_priority_updates": self.op.stale_updates}
