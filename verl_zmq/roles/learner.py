"""Learner: the role shell around one trainer and one feed.

The feed brings batches from the group's replay shards (fragments under
credits from FIFO shards, or sampled batches from uniform and prioritised
ones); the trainer updates in a worker thread, so receiving and heartbeats go
on meanwhile. Params are published on PUB every `sync_interval_updates`
updates, and re-published now and then for members that joined late. When
training ends, a last checkpoint is written and final params are published
until the evaluator (or, without one, the learner itself) ends the job.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import numpy as np
import torch
import zmq

from ..envs import env_spec
from ..learning.feeds import make_feed
from ..learning.links import ShardAddress
from ..learning.trainer import Trainer
from .base import Role, send

REPUBLISH_S = 2.0
FINAL_PUBLISH_S = 120.0  # how long final params are offered to the evaluator


class LearnerRole(Role):
    """Runs the algorithm's updates on experience from its group's shards."""

    name = "learner"

    async def setup(self) -> None:
        job = self.job
        torch.set_num_threads(getattr(job.resources, self.name).cpu or job.training.torch_threads)
        torch.manual_seed(job.experiment.seed)  # the samplers build the same initial net
        np.random.seed(job.experiment.seed)
        self.spec = env_spec(job.environment)
        self.trainer = Trainer(job, self.spec, self.checkpoint_dir(), self.log,
                               reduce_grads=self.grad_reducer())
        self.algo = self.trainer.algo
        # XPUB: a new subscriber (a sampler, the evaluator, after our restart or
        # theirs) is heard, and gets the latest params at once, not at the next update
        self.pub, pub_ep = self.ctx.transport.bind(zmq.XPUB, "params", hwm=8)
        self.pub.setsockopt(zmq.XPUB_VERBOSE, 1)
        self.endpoints = {"params": pub_ep}
        self.feed = make_feed(self.trainer, {
            "transport": self.ctx.transport, "log": self.log, "stats": self.wire_stats,
            "src": self.id, "spawn": lambda coro: self.tasks.create_task(coro)})
        self.shards_changed = asyncio.Event()
        self.published_at = 0.0
        self.finished = False
        self._rate = (time.monotonic(), self.trainer.state.env_steps, self.algo.updates)

    @classmethod
    def preload(cls) -> None:
        import torch._dynamo  # noqa: F401 - the first optimiser imports it lazily (~1.5 s)

    def checkpoint_dir(self) -> Path:
        return Path(self.ctx.run_dir) / "checkpoints"

    def grad_reducer(self):
        """What averages the update's gradients with others (gossip peers), or None."""
        return None

    @property
    def version(self) -> int:
        return self.trainer.state.version

    @property
    def env_steps(self) -> int:
        return self.trainer.state.env_steps

    # -- membership ---------------------------------------------------------------

    def on_membership(self, members) -> None:
        super().on_membership(members)
        self.shards_changed.set()

    async def _shards_loop(self) -> None:
        while True:
            # level-triggered: reconcile on every membership change and at least once
            # per heartbeat interval, so a missed wake-up costs one interval, not the job
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.job.launch.heartbeat_interval_s):
                    await self.shards_changed.wait()
            self.shards_changed.clear()
            await self.feed.reconcile({
                m.id: ShardAddress(m.endpoints.get("requests", ""), m.incarnation)
                for m in self.group_members("replay").values()})

    # -- params -------------------------------------------------------------------

    async def publish(self, final: bool = False) -> None:
        await send(self.pub, self.trainer.params(final), self.id)
        self.published_at = time.monotonic()

    async def _subscribers_loop(self) -> None:
        """Publish again when a subscriber joins (once per burst of joins)."""
        while True:
            joined = (await self.pub.recv())[:1] == b"\x01"  # \x00: one left
            while await self.pub.poll(50):
                joined |= (await self.pub.recv())[:1] == b"\x01"
            if joined and self.published_at:
                await self.publish()

    async def _republish_loop(self) -> None:
        while not self.finished:
            await asyncio.sleep(REPUBLISH_S)
            if time.monotonic() - self.published_at >= REPUBLISH_S:
                await self.publish()

    # -- training -----------------------------------------------------------------

    async def after_update(self) -> None:
        """After each update (a gossip peer exchanges and mixes here)."""

    async def _train(self) -> None:
        await self.publish()
        await self.trainer.run(self.feed, self.publish, self.after_update)
        self.finished = True
        await asyncio.to_thread(self.trainer.checkpoint)
        self.log.info("training_finished", env_steps=self.env_steps, version=self.version,
                      updates=self.algo.updates, **self.finish_counts())
        await self.finish()

    def finish_counts(self) -> dict:
        return {"fragments_dropped": getattr(self.feed, "dropped", 0)}

    async def finish(self) -> None:
        """Training is done: offer final params to the evaluator, which runs a last
        evaluation and stops the job; without one, stop the job now."""
        deadline = time.monotonic() + FINAL_PUBLISH_S
        while self.members_of("evaluator") and time.monotonic() < deadline \
                and not self.stop_event.is_set():
            await self.publish(final=True)
            await asyncio.sleep(1.0)
        await self.job_shutdown("training_finished")

    def members_of(self, role: str) -> list:
        return [m for m in self.members.values() if m.role == role]

    def tasks_to_run(self) -> list:
        return [self._shards_loop(), self._subscribers_loop(), self._republish_loop(),
                self._train()]

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            self.tasks = tg  # shard readers join it as shards come and go
            for coro in self.tasks_to_run():
                tg.create_task(coro)

    async def teardown(self) -> None:
        """Stopped before the end (SIGTERM, job shutdown): keep where training got to."""
        if not self.finished and self.algo.updates > 0:
            self.trainer.checkpoint()

    # -- reports ------------------------------------------------------------------

    def status(self) -> dict[str, float]:
        return {"env_steps": self.env_steps, "version": self.version}

    def metrics(self) -> dict[str, float]:
        now = time.monotonic()
        t, steps, upd = self._rate
        dt = max(now - t, 1e-9)
        self._rate = (now, self.env_steps, self.algo.updates)
        r = self.name
        return {**self.trainer.metrics(r), **self.feed.metrics(r),
                f"{r}/env_steps_per_s": round((self.env_steps - steps) / dt, 1),
                f"{r}/updates_per_s": round((self.algo.updates - upd) / dt, 3)}


ROLE = LearnerRole
