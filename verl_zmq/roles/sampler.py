"""Sampler: steps a vector env with a local policy copy and ships fragments.

Stepping runs in a worker thread (`asyncio.to_thread`) one fragment at a time,
so heartbeats, params and sending go on in the event loop meanwhile. Params
from the group's learner are swapped in at most every `sync_interval_steps`
vector steps without stopping. PUSH spreads fragments round-robin over the
group's shards; when they are full the send waits (backpressure, measured).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from contextlib import AbstractAsyncContextManager
from typing import Any

import numpy as np
import zmq

from .. import wire
from ..batch import job_layout
from ..comm.stalls import Peers
from ..config.members import acting_seeds
from ..config.roles import SAMPLER
from ..config.wiring import FRAGMENTS, SAMPLER_PARAMS
from ..envs.infos import means
from ..envs.make import env_spec
from ..policy.numpy_actor import make_actor
from ..sampling.collector import make_collector
from ..sampling.lockstep import LockStep
from ..sampling.pacing import make_pacer
from .base import Rates, Role, reconnect, recv, send


def _follow(sock: zmq.Socket[Any], current: dict[str, str], wanted: dict[str, str], log: Any,
            what: str) -> bool:
    """`reconnect`, and whether members we were connected to changed."""
    before = dict(current)
    reconnect(sock, current, wanted, log, what)
    return bool(before) and current != before


class SamplerRole(Role):
    """Acts in its envs with the latest params it has and ships fragments."""

    name = SAMPLER

    async def setup(self) -> None:
        spec = env_spec(self.job.environment)
        torch_seed, np_seed = acting_seeds(self.job.experiment.seed, self.ctx.group,
                                           self.ctx.index)
        workers = self.job.sampling.num_workers
        self.algo = make_actor(self.job, spec, (self.ctx.index, workers), (torch_seed, np_seed),
                               device=self.job.sampling.device)
        self.collector = make_collector(self.job, self.algo, self.ctx.index, workers)
        seeds = self.collector.seeds
        self.log.info("sampler_seeds", torch_seed=torch_seed, numpy_seed=np_seed, env_seeds=seeds,
                      inference=type(self.algo).__name__)
        t = self.ctx.transport
        self.push = t.connect_edge(FRAGMENTS, kernel_buffer=job_layout(self.job, spec)
                                   .queue_bytes(self.collector.E))
        self.sub = t.connect_edge(SAMPLER_PARAMS)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.shards: dict[str, str] = {}
        self.learners: dict[str, str] = {}
        self.shard_ready = asyncio.Event()
        self.new_params = asyncio.Event()
        self.pacer = make_pacer(self.job)  # paced to its own learner's batch
        # experiment.deterministic: fragment k acts with version k // m, and no other
        self.lockstep = LockStep(self.job) if self.job.experiment.deterministic else None
        if self.lockstep is not None:
            self.pacer = None
        self.fragments = 0
        self.wait_s = 0.0
        self.waiting_since: float | None = None
        self.param_wait_s = 0.0
        self.param_waits_timed_out = 0
        self.final_seen = False
        self.returns: deque[float] = deque(maxlen=100)
        self.lengths: deque[int] = deque(maxlen=100)
        self.infos: dict[str, deque[float]] = {}  # logging.info_keys, recent episodes
        self.rates = Rates(steps=0, waited=0.0)

    def on_membership(self, members: dict[str, wire.Member]) -> None:
        super().on_membership(members)
        shards = FRAGMENTS.targets(members.values(), self.ctx.group)
        learners = SAMPLER_PARAMS.targets(members.values(), self.ctx.group)
        # a shard that left, or a learner that restarted (it may resume at the very
        # version we heard last, so no lower version would tell us): the fragments
        # they held are lost, and pacing counts afresh
        shards_moved = _follow(self.push, self.shards, shards, self.log, "shard")
        learners_moved = _follow(self.sub, self.learners, learners, self.log, "learner")
        if self.pacer is not None and (shards_moved or learners_moved):
            self.pacer.reset()
        alive = sorted(self.group_members(SAMPLER))
        index = alive.index(self.id) if self.id in alive else None
        if self.pacer is not None:
            # the batch is shared among the samplers alive now: with one lost (its
            # host gone) the others' shares grow, or the learner would wait for
            # fragments no budget allows
            self.pacer.share_among(self.job.fragments_per_batch, len(alive), index or 0)
        if index is not None:  # a share of what samplers share (a prompt file's epoch)
            self.collector.regroup(index, len(alive))
        if self.shards:
            self.shard_ready.set()
        else:
            self.shard_ready.clear()

    def trained_out(self) -> bool:
        """Its learner sent its final params: it trains no more."""
        return self.final_seen

    def _watch(self, exchange: str, peers: Peers) -> AbstractAsyncContextManager[None]:
        """A wait on the training side, watched while it trains (after its final
        params, shards fill and params stop coming by design)."""
        if self.trained_out():
            return contextlib.nullcontext()
        return self.stalls.watch(exchange, peers)

    def _learners_named(self) -> list[str]:
        return sorted(self.learners) or ["no learner of its group is alive"]

    def _shards_named(self) -> list[str]:
        return sorted(self.shards) or ["no shard of its group is alive"]

    async def _params_loop(self) -> None:
        while True:
            async with self._watch(SAMPLER_PARAMS.name, self._learners_named):
                _, msg = await recv(self.sub, self.wire_stats, expect=(wire.Params,))
            if msg is not None and msg.final:
                self.final_seen = True
            # any other version: a learner restarted without a checkpoint counts from 0 again
            c = self.collector
            if msg is not None and self.lockstep is not None:
                self.lockstep.heard(msg.version, msg.arrays)  # swapped in between fragments
                self.new_params.set()
                continue
            if msg is not None and self.pacer is not None:
                self.pacer.heard(msg.updates)
                self.new_params.set()
            if msg is not None and msg.version != c.version:
                self.collector.pending = (msg.version, msg.arrays)
                self.new_params.set()

    async def _wait_for_params(self, timeout: float) -> None:
        """Bounded staleness: wait until params newer than those used arrive."""
        c = self.collector
        while c.pending is None or c.pending[0] == c.version:
            self.new_params.clear()
            try:  # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancel
                async with asyncio.timeout(timeout):
                    await self.new_params.wait()
            except TimeoutError:
                self.param_waits_timed_out += 1
                return

    async def _wait_in_lockstep(self, timeout: float) -> None:
        """Deterministic: until the version the next fragment needs has come; each
        wait of `timeout` without it is counted, and the wait goes on (a learner
        that is gone ends the job, and the sampler with it)."""
        c, lock = self.collector, self.lockstep
        assert lock is not None
        while not lock.ready(c.version):
            self.new_params.clear()
            try:
                async with asyncio.timeout(timeout):
                    await self.new_params.wait()
            except TimeoutError:
                self.param_waits_timed_out += 1
        c.pending = lock.take(c.version)

    async def _wait_for_budget(self, timeout: float) -> bool:
        """Paced: wait until the learner's versions allow another fragment; False
        when `timeout` passed without that (the learner is gone, or it waits for
        fragments that were lost): ship one anyway, outside the budget."""
        deadline = time.monotonic() + timeout  # republished params wake us: one deadline
        assert self.pacer is not None  # paced, or this is not called
        while not self.pacer.may_ship():
            self.new_params.clear()
            try:
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    await self.new_params.wait()
            except TimeoutError:
                self.param_waits_timed_out += 1
                return False
        return True

    async def _collect_loop(self) -> None:
        S = self.job.sampling
        ahead = 1 if S.mode == "sync" else S.max_fragments_ahead
        timeout = self.job.launch.liveness_timeout_s * 2
        shipped, last_version = 0, None
        self.log.info("sampling_started", envs=self.collector.E,
                      fragment_length=self.collector.T)
        while True:
            t0 = time.monotonic()
            in_budget = True
            if self.lockstep is not None:
                async with self._watch(SAMPLER_PARAMS.name, self._learners_named):
                    await self._wait_in_lockstep(timeout)
            elif self.pacer is not None:
                in_budget = await self._wait_for_budget(timeout)
            elif ahead and shipped >= ahead:
                await self._wait_for_params(timeout)
            self.param_wait_s += time.monotonic() - t0
            c = self.collector
            arrays, version = await asyncio.to_thread(c.collect)
            if self.collector.version != last_version:
                shipped, last_version = 0, self.collector.version
            self.returns.extend(arrays["ep_return"].tolist())
            self.lengths.extend(arrays["ep_length"].tolist())
            for k, vals in c.infos_taken().items():
                self.infos.setdefault(k, deque(maxlen=100)).extend(vals)
            self.waiting_since = time.monotonic()
            async with self._watch(FRAGMENTS.name, self._shards_named):
                await self.shard_ready.wait()
                await send(self.push, wire.Fragment(version=version, arrays=arrays), self.id)
            self.wait_s += time.monotonic() - self.waiting_since
            self.waiting_since = None
            self.fragments += 1
            shipped += 1
            if self.lockstep is not None:
                self.lockstep.shipped += 1
            if self.pacer is not None:
                self.pacer.shipped_one(forgiven=not in_budget)

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._params_loop())
            tg.create_task(self._collect_loop())

    def status(self) -> dict[str, float]:
        return {"fragments": self.fragments, "version": self.collector.version}

    def _waited(self, now: float) -> float:
        """Seconds spent blocked on sending, a send still blocked included."""
        since = self.waiting_since
        return self.wait_s + (now - since if since is not None else 0.0)

    def metrics(self) -> dict[str, float]:
        c = self.collector
        env_steps = c.steps * c.E
        waited = self._waited(time.monotonic())
        d, dt = self.rates.update(steps=env_steps, waited=waited)
        out = {"sampler/env_steps": env_steps,
               "sampler/env_steps_per_s": round(d["steps"] / dt, 1),
               "sampler/fragments": self.fragments,
               "sampler/backpressure_wait_frac": round(d["waited"] / dt, 4),
               "sampler/backpressure_wait_s": round(waited, 3),
               "sampler/param_wait_s": round(self.param_wait_s, 3),
               "sampler/param_waits_timed_out": self.param_waits_timed_out,
               "sampler/stalls": self.stalls.count,
               "sampler/policy_version": c.version, "sampler/param_swaps": c.swaps,
               "sampler/params_rejected": c.rejected_params}
        out.update(c.metrics())  # its own: env failures, tokens, timing_s/gen
        if self.returns:
            out["sampler/episode_return_mean"] = round(float(np.mean(self.returns)), 3)
            out["sampler/episode_length_mean"] = round(float(np.mean(self.lengths)), 1)
        out.update(means(self.infos, "sampler/info/"))
        return out

    async def teardown(self) -> None:
        self.collector.close()


ROLE = SamplerRole
