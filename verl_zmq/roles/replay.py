"""Replay shard: one shell around a store (FIFO, uniform or prioritised).

PULL takes fragments from any sampler of the group and validates each once,
against the job's fragment layout; ROUTER takes the learner's requests. The
learner grants credits, the shard answers each with one item (a fragment, or a
sampled batch) when the store can serve, so a few are always in flight and the
learner never waits while data exists. When the store cannot take a fragment
(full, or the replay-ratio limiter says the learner is behind) the shard stops
reading and samplers block on their PUSH high-water mark: backpressure,
measured. Stores that persist are snapshotted now and then and on stop, and
every insert between two snapshots goes to a write-ahead log (`replay/wal.py`)
written every `replay.wal_interval_s`: a replacement loads the snapshot, replays
the log, then serves. Imports no torch.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np
import zmq

from .. import wire
from ..batch import job_layout
from ..comm.messaging import decode, recv_frames
from ..config.roles import REPLAY
from ..envs.make import job_spec
from ..learning.health import ShardHealth
from ..log import write_failed
from ..replay import snapshot, wal
from ..replay.store import RejectedFragment
from ..replay.stores import make_store
from .base import Rates, Role, recv, send

MAX_CREDIT = 1000
MAX_BATCH = 65_536
# incremental snapshots after a full one before the next full one: a restore reads
# at most this many files, and the deltas' repeated priorities stay bounded
MAX_DELTAS = 10


class ReplayRole(Role):
    """One shard of the job's replay."""

    name = REPLAY

    async def setup(self) -> None:
        t = self.ctx.transport
        job, spec, self.policy = job_spec(self.job, self.ctx.group)  # a multi-agent job's policy
        self.layout = job_layout(job, spec)
        self.pull, pull_ep = t.bind(zmq.PULL, "fragments", hwm=2, kernel_buffer=self.layout
                                    .queue_bytes(self.job.sampling.num_envs_per_worker))
        self.router, req_ep = t.bind(zmq.ROUTER, "requests", hwm=1000)
        self.router.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.endpoints = {"fragments": pull_ep, "requests": req_ep}
        self.credits: dict[bytes, int] = {}
        self.batch_size: dict[bytes, int] = {}
        self.space = asyncio.Event()
        self.store = make_store(self.job, self.ctx.index)
        self.health = ShardHealth(self.job)
        self.snapshot_dir = snapshot.snapshot_dir(self.ctx.run_dir, self.id)
        self.inserts = self.served = self.rejected = 0
        self.snapshots, self.snapshot_s = 0, 0.0  # periodic and on stop
        self.snapshot_inserts = 0  # `inserts` when the last snapshot was taken
        # the store's insert count at the last file written (None: the next is full)
        # and the deltas written since the last full snapshot
        self.snapshot_base: int | None = None
        self.deltas = 0
        self.delay_sum = self.blocked_s = 0.0
        self.rates = Rates(inserts=0, served=0, delay=0.0)
        self.wal: wal.WriteAheadLog | None = None
        self.wal_lock = asyncio.Lock()  # a write in its thread, a cut file's removal
        if self.store.persistent:
            seq = self._restore()
            if self.job.replay.wal_interval_s > 0 and self.job.replay.snapshot_interval_s > 0:
                self.wal = wal.WriteAheadLog(self.snapshot_dir, seq)

    # -- fragments in -------------------------------------------------------------

    async def _next_fragment(self) -> tuple[list[zmq.Frame], wire.Fragment | None]:
        """One fragment from the PULL socket with its frames as they came (what the
        write-ahead log keeps), or None (counted, logged) when it is bad."""
        frames = await recv_frames(self.pull)
        _, msg = decode(frames, self.wire_stats, expect=(wire.Fragment,))
        if msg is None:
            return frames, None
        why = self.layout.problem(msg.arrays)
        if not why and msg.policy != self.policy:
            why = f"policy {msg.policy!r}, this shard holds {self.policy or 'no policy'!r}'s"
        if why:
            self.reject_fragment(msg, why)
            return frames, None
        frag: wire.Fragment = msg
        return frames, frag

    def reject_fragment(self, msg: wire.Fragment, why: str) -> None:
        self.rejected += 1
        self.wire_stats.reject(msg.src, wire.WireError(f"bad fragment: {why}"))

    async def _ingest(self) -> None:
        while True:
            frames, msg = await self._next_fragment()
            if msg is None:
                continue
            try:
                item = self.store.prepare(msg)
            except RejectedFragment as e:
                self.reject_fragment(msg, str(e))
                continue
            while not self.store.can_insert(item):  # full, or the learner is behind
                self.space.clear()
                t0 = time.monotonic()
                await self.space.wait()  # not reading: samplers block on their PUSH
                self.blocked_s += time.monotonic() - t0
            try:
                self.store.insert(item)
            except RejectedFragment as e:  # columns that do not match what is stored
                self.reject_fragment(msg, str(e))
                continue
            self.inserts += 1
            if self.wal is not None:
                self.wal.append(frames)
            await self._serve()

    # -- requests and serving -----------------------------------------------------

    async def _requests(self) -> None:
        while True:
            prefix, msg = await recv(self.router, self.wire_stats, n_prefix=1,
                                     expect=(wire.SampleRequest, wire.PriorityUpdate))
            if msg is None:
                continue
            if isinstance(msg, wire.PriorityUpdate):
                why = self.store.update_priorities_msg(msg)
                if why:
                    self.wire_stats.reject(msg.src, wire.WireError(f"bad priority update: {why}"))
                continue
            ident = prefix[0].bytes
            self.credits[ident] = min(self.credits.get(ident, 0) + max(0, msg.credit),
                                      MAX_CREDIT)
            if msg.batch_size > 0:
                self.batch_size[ident] = min(msg.batch_size, MAX_BATCH)
            await self._serve()

    async def _serve(self) -> None:
        """Answer credits while the store can serve."""
        for ident in list(self.credits):
            n = self.batch_size.get(ident, 0)
            while self.credits.get(ident, 0) > 0 and self.store.can_serve(n):
                msg = self.store.take(n)
                try:
                    await send(self.router, msg, self.id, prefix=[ident])
                except zmq.ZMQError:  # that learner is gone: forget its credit, keep the data
                    self.credits.pop(ident, None)
                    self.store.untake(msg)
                    break
                self.credits[ident] -= 1
                self.served += 1
                self.delay_sum += max(0.0, time.time() - msg.inserted_t)
        self.space.set()  # serving may have made room: the ingest loop checks again

    # -- snapshots ----------------------------------------------------------------

    def _restore(self) -> int:
        """The last snapshot, then the log's inserts after it; the log's next seq."""
        t0 = time.monotonic()
        since = 0
        try:
            state = snapshot.read(self.snapshot_dir)
            if state is not None:
                self.store.load_state(state)
                since = int(state["wal_seq"][0]) if "wal_seq" in state else 0
        except (OSError, ValueError, KeyError) as e:  # unreadable: start empty, say so
            self.log.error("replay_restore_failed", path=str(self.snapshot_dir), error=str(e))
            self.store = make_store(self.job, self.ctx.index)
            return 0
        from_snapshot = self.store.size
        seq, logged = self._replay_log(since)
        if state is None and not logged:
            return seq
        self.log.info("replay_restored", path=str(self.snapshot_dir), size=self.store.size,
                      from_snapshot=from_snapshot, logged_inserts=logged,
                      env_steps=self.store.env_steps, seconds=round(time.monotonic() - t0, 3))
        return seq

    def _replay_log(self, since: int) -> tuple[int, int]:
        """Insert what the log holds from `since` on; (next seq, inserts replayed). A
        record the wire or the store refuses ends the replay there, said."""
        seq, n = since, 0
        for seq_at, frames in wal.replay(self.snapshot_dir, since):
            try:
                msg = wire.decode(frames)
                if not isinstance(msg, wire.Fragment):
                    raise wire.WireError(f"a {msg.KIND.name} in the log")
                self.store.insert(self.store.prepare(msg))
            except (wire.WireError, RejectedFragment) as e:
                self.log.warning("replay_log_stopped", seq=seq_at, error=str(e))
                break
            seq, n = seq_at + 1, n + 1
        return seq, n

    async def _snapshot(self, full: bool = False) -> float:
        """Write a snapshot, incremental (what was inserted since the last file)
        unless `full` or the chain is long; the seconds it took (0 when it failed)."""
        t0 = time.monotonic()
        # copies, taken between two messages: consistent
        delta = None if full or self.snapshot_base is None or self.deltas >= MAX_DELTAS \
            else self.store.delta(self.snapshot_base)
        state = delta if delta is not None else self.store.state()
        # the log's records from here on are not in this copy: a new log file
        seq = self.wal.cut() if self.wal is not None else None
        if seq is not None:
            state["wal_seq"] = np.array([seq], np.int64)
        self.snapshot_inserts = self.inserts
        try:
            if delta is not None:
                path = await asyncio.to_thread(snapshot.write_delta, self.snapshot_dir, state,
                                               self.deltas + 1)
            else:
                path = await asyncio.to_thread(snapshot.write, self.snapshot_dir, state)
        except OSError as e:
            write_failed(self.log, "replay_snapshot_failed", self.snapshot_dir / snapshot.FILE,
                         e, "keeping the last snapshot")
            self.snapshot_base = None  # the chain may have a gap: the next one is full
            return 0.0
        self.deltas = self.deltas + 1 if delta is not None else 0
        self.snapshot_base = int(state["counters"][2])
        if seq is not None and self.wal is not None:
            async with self.wal_lock:  # not while a write appends to those files
                self.wal.drop_before(seq)
        took = time.monotonic() - t0
        self.snapshots += 1
        self.snapshot_s += took
        self.log.info("replay_snapshot", path=str(path), size=self.store.size,
                      kind="delta" if delta is not None else "full",
                      rows=len(state["slots"]) if delta is not None else self.store.size,
                      bytes=path.stat().st_size, seconds=round(took, 3))
        return took

    async def _snapshot_loop(self) -> None:
        cfg = self.job.replay
        wait = cfg.snapshot_interval_s
        while True:
            await asyncio.sleep(wait)
            if not self.store.size or self.inserts == self.snapshot_inserts:
                continue  # nothing new to keep
            took = await self._snapshot()
            # a big buffer takes long to write: wait long enough that writing stays
            # under its share of the shard's time
            wait = max(cfg.snapshot_interval_s, took / max(cfg.snapshot_max_share, 1e-3))
            if wait > cfg.snapshot_interval_s:
                self.log.info("replay_snapshot_interval_stretched", seconds=round(wait, 1),
                              took=round(took, 3))

    async def _wal_loop(self) -> None:
        while self.wal is not None:
            await asyncio.sleep(self.job.replay.wal_interval_s)
            await self._wal_write()

    async def _wal_write(self) -> None:
        """Write and fsync what was logged since the last write; a full disk ends the
        log (said), never the shard."""
        log = self.wal
        if log is None:
            return
        async with self.wal_lock:
            records = log.take()
            if not records:
                return
            try:
                await asyncio.to_thread(log.write, records)
            except OSError as e:
                write_failed(self.log, "replay_wal_failed", self.snapshot_dir / "wal-*.log", e,
                             "no insert log from here on: a killed shard comes back with "
                             "its last snapshot alone")
                log.close()
                self.wal = None

    # -- lifecycle ----------------------------------------------------------------

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._ingest())
            tg.create_task(self._requests())
            if self.store.persistent and self.job.replay.snapshot_interval_s > 0:
                tg.create_task(self._snapshot_loop())
            if self.wal is not None:
                tg.create_task(self._wal_loop())

    async def teardown(self) -> None:
        if self.store.persistent and self.store.size:
            await self._snapshot(full=True)  # one file to resume from (the log dropped)
        elif self.wal is not None:
            await self._wal_write()
        if self.wal is not None:
            self.wal.close()

    def status(self) -> dict[str, float]:
        return {"size": self.store.size}

    def metrics(self) -> dict[str, float]:
        d, dt = self.rates.update(inserts=self.inserts, served=self.served,
                                  delay=self.delay_sum)
        return {**self.store.metrics(),
                "replay/inserts": self.inserts, "replay/served": self.served,
                "replay/inserts_per_s": round(d["inserts"] / dt, 2),
                "replay/served_per_s": round(d["served"] / dt, 2),
                "replay/serve_delay_s": round(d["delay"] / d["served"], 4)
                if d["served"] else 0.0,
                "replay/rejected": self.rejected,
                "replay/blocked_s": round(self.blocked_s, 3),
                "replay/snapshots": self.snapshots,
                "replay/snapshot_s": round(self.snapshot_s, 3),
                "replay/wal_bytes": self.wal.bytes_written if self.wal is not None else 0}

    def reported(self, values: dict[str, Any]) -> None:
        for event, fields in self.health.report(values):
            self.log.warning(event, **fields)


ROLE = ReplayRole
