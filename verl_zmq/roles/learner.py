"""Learner: the role shell around one trainer and one feed.

The feed brings batches from the group's replay shards (fragments under
credits from FIFO shards, or sampled batches from uniform and prioritised
ones); the trainer updates in a worker thread, so receiving and heartbeats go
on meanwhile. Params are published on PUB every `sync_interval_updates`
updates (copies of the weights, taken between updates), and that last message is
sent again now and then and when a member subscribes late. When
training ends, a last checkpoint is written and final params are published
until the evaluator (or, without one, the learner itself) ends the job.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
import zmq

from .. import wire
from ..algos.base import GradReduce, resolve_device
from ..comm.messaging import recv_frames
from ..config.roles import EVALUATOR, LEARNER, REPLAY
from ..config.wiring import DIST, REQUESTS
from ..envs.make import job_spec
from ..learning.data_parallel import LearnerGroup, free_port
from ..learning.feeds import make_feed
from ..learning.links import ShardAddress
from ..learning.state import LinkConfig
from ..learning.trainer import Trainer
from .base import Rates, Role, index_of, send
from .service import EXIT_FAILED

REPUBLISH_S = 2.0
FINAL_PUBLISH_S = 120.0  # how long final params are offered to the evaluator


class LearnerRole(Role):
    """Runs the algorithm's updates on experience from its group's shards."""

    name = LEARNER
    data_parallel: ClassVar[bool] = True  # forms a group of ranks (training.num_learners)

    async def setup(self) -> None:
        # one rank's share (num_learners); a multi-agent job's: its policy's
        job, self.spec, self.policy = job_spec(self.job.learner_view(), self.ctx.group)
        self.job = job
        torch.set_num_threads(getattr(job.resources, self.name).cpu or job.training.torch_threads)
        if job.experiment.deterministic:  # the same sums in the same order, every run
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
            torch.set_num_threads(1)
            torch.use_deterministic_algorithms(True)
        torch.manual_seed(job.experiment.seed)  # the samplers build the same initial net
        np.random.seed(job.experiment.seed)
        T = job.training
        self.group = None
        if T.num_learners > 1 and self.data_parallel:
            self.group = LearnerGroup(index_of(self.id), T.num_learners,
                                      resolve_device(T.device), T.learner_timeout_s)
        self.formed: dict[str, int] = {}  # the group's members and incarnations, once formed
        steps = None  # on-policy ranks consume their own fragments; off-policy ones
        if self.group is not None:  # all read the shards' one count
            steps = self.group.sum_steps if job.traits.on_policy else self.group.max_steps
        self.trainer = Trainer(job, self.spec, self.checkpoint_dir(), self.log,
                               reduce_grads=self.grad_reducer(), sum_steps=steps,
                               primary=self.primary)
        self.trainer.take_followed(self.ctx.extra.get("followed"))  # a warm spare's
        self.algo = self.trainer.algo
        self.pub = None
        self.endpoints = {}
        if self.primary:
            # XPUB: a new subscriber (a sampler, the evaluator, after our restart or
            # theirs) is heard, and gets the latest params at once, not at the next update
            # deterministic: no version dropped for a busy evaluator (it evaluates the
            # first past each interval, which must reach it in every run)
            self.pub, pub_ep = self.ctx.transport.bind(
                zmq.XPUB, "params", hwm=0 if job.experiment.deterministic else 8)
            self.pub.setsockopt(zmq.XPUB_VERBOSE, 1)
            self.endpoints["params"] = pub_ep
        if self.group is not None and self.primary:
            t = self.ctx.transport
            lo, hi = self.job.launch.port_range
            port = free_port(t.host, lo, hi, t.reserved)
            self.endpoints["dist"] = f"tcp://{t.host}:{port}"
        self.feed = make_feed(self.trainer, LinkConfig(self.ctx.transport, self.log,
                                                       self.wire_stats, self.id))
        self.shards_changed = asyncio.Event()
        self.published_at = 0.0
        self.last_params: wire.Params | None = None  # resent to late subscribers
        self.finished = False
        self.rates = Rates(steps=self.trainer.state.env_steps, updates=self.algo.updates)

    @classmethod
    def preload(cls) -> None:
        from ..algos import algorithm_class
        from ..config.algorithms import ALGORITHMS

        for name in ALGORITHMS:  # each algorithm's module and what it imports
            algorithm_class(name)

    def checkpoint_dir(self) -> Path:
        """checkpoints/, or a multi-agent job's checkpoints/<policy>/ where several
        policies train (each its own learner)."""
        base = Path(self.ctx.run_dir) / "checkpoints"
        return base / self.job.multiagent.checkpoint_folder(self.policy)

    @property
    def primary(self) -> bool:
        """Publishes params and writes checkpoints: the learner, or a group's rank 0."""
        return self.group is None or self.group.primary

    def grad_reducer(self) -> GradReduce | None:
        """What averages the update's gradients with others (data-parallel ranks,
        gossip peers), or None."""
        return self.group.reduce if self.group is not None else None

    # -- data-parallel ranks ----------------------------------------------------------

    async def _form_group(self) -> None:
        """Join the group's ranks at rank 0's `dist` endpoint, then take rank 0's state."""
        g, T = self.group, self.job.training
        assert g is not None  # data-parallel ranks only
        deadline = time.monotonic() + T.learner_timeout_s
        while True:
            ranks = {m.id: m for m in self.members_of(LEARNER)
                     if m.group == self.ctx.group and index_of(m.id) < g.world}
            first = ranks.get("learner-0")
            if first is not None and DIST.endpoint_of(first) and len(ranks) == g.world:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"learner group: {g.world - len(ranks)} of {g.world} learners "
                                   f"did not register within {T.learner_timeout_s:g}s "
                                   f"(have {sorted(ranks)})")
            await asyncio.sleep(0.1)
        endpoint = DIST.endpoint_of(first)
        self.log.info("learner_group_joining", rank=g.rank, world=g.world, backend=g.backend,
                      endpoint=endpoint)
        if not g.primary:  # rank 0 restarting meanwhile: this join would wait for nothing
            self.formed = {"learner-0": first.incarnation}
        assert first is not None
        await asyncio.to_thread(g.join, endpoint)
        await asyncio.to_thread(self.trainer.take_group_state, g)  # rank 0's, everywhere
        s = self.trainer.state
        self.formed = {m.id: m.incarnation for m in ranks.values()}
        self.log.info("learner_group_formed", rank=g.rank, world=g.world, backend=g.backend,
                      env_steps=s.env_steps, version=s.version, members=sorted(self.formed))

    def _check_group(self, members: dict[str, wire.Member]) -> None:
        """A rank that left or restarted breaks the group: a collective would wait for
        it until the timeout. Leave at once; the launcher restarts us and the group
        forms again from rank 0's latest checkpoint."""
        if not self.formed or self.finished or self.stop_event.is_set():
            return
        now = {m.id: m.incarnation for m in members.values()}
        gone = sorted(i for i, inc in self.formed.items() if now.get(i) != inc)
        if gone:
            self.log.error("learner_group_broken", lost=gone,
                           rank=self.group.rank if self.group is not None else 0)
            print(f"error: {self.id}: learner group broken: {', '.join(gone)} left or "
                  f"restarted; leaving so that the group forms again", file=sys.stderr,
                  flush=True)
            # a collective in the update's thread cannot be interrupted: exit now
            os._exit(EXIT_FAILED)

    @property
    def version(self) -> int:
        return self.trainer.state.version

    @property
    def env_steps(self) -> int:
        return self.trainer.state.env_steps

    # -- membership ---------------------------------------------------------------

    def on_membership(self, members: dict[str, wire.Member]) -> None:
        super().on_membership(members)
        self.shards_changed.set()
        if self.group is not None:
            self._check_group(members)

    async def _shards_loop(self) -> None:
        while True:
            # level-triggered: reconcile on every membership change and at least once
            # per heartbeat interval, so a missed wake-up costs one interval, not the job
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.job.launch.heartbeat_interval_s):
                    await self.shards_changed.wait()
            self.shards_changed.clear()
            shards = self.group_members(REPLAY).values()
            await self.feed.reconcile({m.id: ShardAddress(REQUESTS.endpoint_of(m), m.incarnation)
                                       for m in shards})

    # -- params -------------------------------------------------------------------

    async def publish(self, final: bool = False) -> None:
        """Publish the params held now: called between updates, never during one."""
        if self.pub is None:  # a data-parallel rank other than 0: rank 0 publishes
            return
        self._above_seen()
        self.last_params = self.trainer.params(final)
        await self._send_last()

    def _above_seen(self) -> None:
        """A trainer that took over from params older than the ones its group has
        used (the killed one published past what its spare followed) numbers its
        next params above the highest version the registry heard of, so no sampler
        or evaluator ever sees a version go back or a number stand for two policies.
        Not for gossip peers, whose versions are each their own."""
        client = self.registry_client
        s = self.trainer.state
        if client is None or self.job.traits.decentralised or client.version_seen <= s.version:
            return
        self.log.info("version_floor_taken", version=s.version,
                      version_seen=client.version_seen, now=client.version_seen + 1)
        s.version = client.version_seen + 1

    async def _send_last(self) -> None:
        """Send the params last published again. Not the live ones: the subscriber
        and republish loops run while an update changes them, and those would go
        out as a mix of two versions under the older one's number."""
        if self.pub is not None and self.last_params is not None:
            await send(self.pub, self.last_params, self.id)
            self.published_at = time.monotonic()

    async def _subscribers_loop(self) -> None:
        """Publish again when a subscriber joins (once per burst of joins)."""
        pub = self.pub
        assert pub is not None  # the primary's: only it runs this loop
        while True:
            joined = (await recv_frames(pub))[0].bytes[:1] == b"\x01"  # \x00: one left
            while await pub.poll(50):
                joined |= (await recv_frames(pub))[0].bytes[:1] == b"\x01"
            if joined:
                await self._send_last()

    async def _republish_loop(self) -> None:
        while not self.finished:
            await asyncio.sleep(REPUBLISH_S)
            if time.monotonic() - self.published_at >= REPUBLISH_S:
                await self._send_last()

    # -- training -----------------------------------------------------------------

    async def after_update(self) -> None:
        """After each update (a gossip peer exchanges and mixes here)."""

    async def _train(self) -> None:
        if self.group is not None:
            await self._form_group()
        await self.publish()
        await self.trainer.run(self.feed, self.publish, self.after_update)
        self.finished = True
        await asyncio.to_thread(self.trainer.checkpoint)
        self.log.info("training_finished", env_steps=self.env_steps, version=self.version,
                      updates=self.algo.updates, **self.finish_counts())
        if self.primary:  # rank 0 offers the final params and ends the job
            await self.finish()

    def finish_counts(self) -> dict[str, int]:
        return {"fragments_dropped": self.feed.dropped}

    async def finish(self) -> None:
        """Training is done: offer final params to the evaluator, which runs a last
        evaluation and stops the job; without one, stop the job now."""
        deadline = time.monotonic() + FINAL_PUBLISH_S
        while self.members_of(EVALUATOR) and time.monotonic() < deadline \
                and not self.stop_event.is_set():
            await self.publish(final=True)
            await asyncio.sleep(1.0)
        await self.job_shutdown("training_finished")

    def members_of(self, role: str) -> list[wire.Member]:
        return [m for m in self.members.values() if m.role == role]

    def tasks_to_run(self) -> list[Coroutine[Any, Any, None]]:
        if self.pub is None:
            return [self._shards_loop(), self._train()]
        return [self._shards_loop(), self._subscribers_loop(), self._republish_loop(),
                self._train()]

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            self.tasks = tg  # gossip exchanges join it
            self.feed.attach(tg)  # shard readers join it as shards come and go
            for coro in self.tasks_to_run():
                tg.create_task(coro)

    async def teardown(self) -> None:
        """Stopped before the end (SIGTERM, job shutdown): keep where training got to."""
        if not self.finished and self.algo.updates > 0:
            self.trainer.checkpoint()

    # -- reports ------------------------------------------------------------------

    def status(self) -> dict[str, float]:
        return {"env_steps": self.env_steps, "version": self.version}

    def reported(self, values: dict[str, Any]) -> None:
        for event, fields in self.trainer.health.report(self.name, values):
            self.log.warning(event, version=self.version, **fields)

    def metrics(self) -> dict[str, float]:
        d, dt = self.rates.update(steps=self.env_steps, updates=self.algo.updates)
        r = self.name
        out: dict[str, Any] = {**self.trainer.metrics(r), **self.feed.metrics(r)}
        return {**out, f"{r}/env_steps_per_s": round(d["steps"] / dt, 1),
                f"{r}/updates_per_s": round(d["updates"] / dt, 3)}


ROLE = LearnerRole
