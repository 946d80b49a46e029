"""The sampler of a multi-agent job: one `MultiAgentCollector` over copies of a
PettingZoo env, a policy copy per trained policy (and the fixed ones), a PUSH
to each trained policy's shards, and a SUB to every trained policy's learner.

A trained policy's fragments go to its own group's shards (with its name on
each, checked there). Params are told apart by their sender's group. Samplers
are not paced to a learner's batch here (several learners): each ships at most
`ahead` fragments of a policy on one version of its params (a share of a
batch, plus `sampling.max_fragments_ahead`), then waits for that policy's next
params, at most twice the liveness timeout. A policy whose learner has finished
(its final params) still acts, on those params; its fragments are not shipped.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import numpy as np
import zmq

from .. import wire
from ..config.members import acting_seeds
from ..config.roles import SAMPLER
from ..config.wiring import FRAGMENTS, SAMPLER_PARAMS
from ..envs.agents import policy_spec
from ..policy.numpy_actor import make_actor
from ..sampling.agents import MultiAgentCollector
from .base import Rates, recv, send
from .sampler import SamplerRole, _follow


class MultiAgentSampler(SamplerRole):
    """Steps a multi-agent env and ships each trained policy's fragments."""

    name = SAMPLER

    async def setup(self) -> None:
        job, ma = self.job, self.job.multiagent
        self.torch_seed, self.np_seed = acting_seeds(job.experiment.seed, self.ctx.group,
                                                     self.ctx.index)
        workers = job.sampling.num_workers
        self.workers = workers
        actors: dict[str, Any] = {}
        for p in ma.names:
            fixed = ma.policy(p).fixed
            if p in ma.trained or fixed.endswith(".pt"):
                actors[p] = self._actor(p)
            if fixed.endswith(".pt"):
                actors[p].load_policy_arrays(_checkpoint_policy(fixed))
        self.collector: Any = MultiAgentCollector(job, actors, self.ctx.index, workers,
                                                  self._snapshot)
        c = self.collector
        self.log.info("sampler_seeds", torch_seed=self.torch_seed, numpy_seed=self.np_seed,
                      env_seeds=c.seeds, policies=ma.trained, agents=list(c.names))
        t = self.ctx.transport
        self.groups = {p: ma.group_of(p) for p in ma.trained}
        self.pushes = {p: t.connect_edge(FRAGMENTS, kernel_buffer=c.layouts[p].queue_bytes(
            c.seats[p].E)) for p in ma.trained}
        self.push = self.pushes[ma.trained[0]]
        self.sub = t.connect_edge(SAMPLER_PARAMS)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.shards_of: dict[str, dict[str, str]] = {p: {} for p in ma.trained}
        self.shards: dict[str, str] = {}
        self.learners: dict[str, str] = {}
        self.member_groups: dict[str, str] = {}
        self.shard_ready = asyncio.Event()
        self.new_params = asyncio.Event()
        self.pacer = None
        self.fragments = 0
        self.wait_s = 0.0
        self.waiting_since: float | None = None
        self.param_wait_s = 0.0
        self.param_waits_timed_out = 0
        self.infos: dict[str, Any] = {}
        self.rates = Rates(steps=0, waited=0.0)
        self.shipped = {p: 0 for p in ma.trained}  # on the policy's current version
        self.finished: set[str] = set()  # policies whose learner is done: not shipped
        self.unshipped = 0
        self.ahead = {p: self._ahead(p) for p in ma.trained}

    def _actor(self, policy: str, seed_offset: int = 0) -> Any:
        job = self.job.policy_view(policy)
        spec = policy_spec(job.environment, job.multiagent, policy)
        return make_actor(job, spec, (self.ctx.index, self.workers),
                          (self.torch_seed + seed_offset, self.np_seed + seed_offset))

    def _snapshot(self, policy: str, arrays: dict[str, np.ndarray]) -> Any:
        """A league snapshot: a copy of the policy acting with these params."""
        actor = self._actor(policy, seed_offset=1 + len(self.collector.leagues[policy].snaps))
        actor.load_policy_arrays(arrays)
        return actor

    def _ahead(self, policy: str) -> int:
        """Fragments of a policy shipped on one params version before waiting."""
        job = self.job.policy_view(policy)
        per = self.collector.seats[policy].E * self.collector.T
        share = math.ceil(job.algorithm.params.batch_size / per / max(1, self.workers))
        return int(max(1, share) + self.job.sampling.max_fragments_ahead)

    def on_membership(self, members: dict[str, wire.Member]) -> None:
        super(SamplerRole, self).on_membership(members)
        self.member_groups = {m.id: m.group for m in members.values()}
        for p, push in self.pushes.items():
            wanted = FRAGMENTS.targets(members.values(), self.groups[p])
            _follow(push, self.shards_of[p], wanted, self.log, f"shard of {p}")
        learners = SAMPLER_PARAMS.targets(members.values(), set(self.groups.values()))
        _follow(self.sub, self.learners, learners, self.log, "learner")
        self.shards = {k: v for d in self.shards_of.values() for k, v in d.items()}
        if all(self.shards_of.values()):
            self.shard_ready.set()
        else:
            self.shard_ready.clear()

    def _policy_of(self, src: str) -> str | None:
        group = self.member_groups.get(src)
        for p, g in self.groups.items():
            if g == group:
                return p
        return None

    def trained_out(self) -> bool:
        return self.finished >= set(self.collector.seats)

    async def _params_loop(self) -> None:
        while True:
            async with self._watch(SAMPLER_PARAMS.name, self._learners_named):
                _, msg = await recv(self.sub, self.wire_stats, expect=(wire.Params,))
            if msg is None:
                continue
            p = self._policy_of(msg.src)
            if p is None:
                continue
            c = self.collector
            if msg.final and p not in self.finished:  # it trains no more: it only acts
                self.finished.add(p)
                self.new_params.set()
            if msg.version != c.versions[p]:
                c.offer(p, msg.version, msg.updates, dict(msg.arrays))
                self.shipped[p] = 0
                self.new_params.set()

    async def _wait_for(self, policy: str, timeout: float) -> None:
        """Wait until the policy's next params arrive (or `timeout`)."""
        deadline = time.monotonic() + timeout
        while self.shipped[policy] >= self.ahead[policy] and policy not in self.finished:
            self.new_params.clear()
            try:
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    await self.new_params.wait()
            except TimeoutError:
                self.param_waits_timed_out += 1
                self.shipped[policy] = 0
                return

    async def _collect_loop(self) -> None:
        timeout = self.job.launch.liveness_timeout_s * 2
        c = self.collector
        self.log.info("sampling_started", envs=c.copies_n, fragment_length=c.T,
                      policies=list(c.seats))
        while True:
            t0 = time.monotonic()
            for p in c.seats:
                await self._wait_for(p, timeout)
            self.param_wait_s += time.monotonic() - t0
            ready = await asyncio.to_thread(c.collect_ready)
            self.waiting_since = time.monotonic()
            async with self._watch(FRAGMENTS.name, self._shards_named):
                await self.shard_ready.wait()
                for p, arrays, version in ready:
                    if p in self.finished:
                        self.unshipped += 1
                        continue
                    await send(self.pushes[p], wire.Fragment(version=version, arrays=arrays,
                                                             policy=p), self.id)
                    self.fragments += 1
                    self.shipped[p] += 1
            self.wait_s += time.monotonic() - self.waiting_since
            self.waiting_since = None

    def status(self) -> dict[str, float]:
        return {"fragments": self.fragments, "version": self.collector.version}

    def metrics(self) -> dict[str, float]:
        c = self.collector
        waited = self._waited(time.monotonic())
        d, dt = self.rates.update(steps=c.agent_steps, waited=waited)
        out = {"sampler/env_steps": c.steps * c.copies_n,
               "sampler/agent_steps_per_s": round(d["steps"] / dt, 1),
               "sampler/fragments": self.fragments,
               "sampler/backpressure_wait_frac": round(d["waited"] / dt, 4),
               "sampler/param_wait_s": round(self.param_wait_s, 3),
               "sampler/param_waits_timed_out": self.param_waits_timed_out,
               "sampler/param_swaps": c.swaps, "sampler/params_rejected": c.rejected_params,
               "sampler/fragments_of_finished_policies": self.unshipped,
               **{f"sampler/policy_version/{p}": v for p, v in c.versions.items()}}
        out.update(c.metrics())
        if "sampler/team_return_mean" in out:  # what one-agent tools chart
            out["sampler/episode_return_mean"] = out["sampler/team_return_mean"]
        return out


def _checkpoint_policy(path: str) -> dict[str, np.ndarray]:
    """The policy arrays of a checkpoint (best.pt, latest.pt), read weights-only."""
    from ..checkpoint import load  # torch: only where a checkpoint plays

    state = load(path)
    policy = state.get("policy")
    if not isinstance(policy, dict):
        raise ValueError(f"{path}: holds no policy arrays")
    return {k: np.asarray(v.cpu().numpy() if hasattr(v, "cpu") else v, np.float32)
            for k, v in policy.items()}


ROLE = MultiAgentSampler
