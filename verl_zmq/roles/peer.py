"""DAPO peer: a learner of its own group (its own samplers and FIFO shard) that
shares what it learns with a few neighbours by gossip, with no centre.

The role is the learner's shell and loop (`LearnerRole`: trainer, fragment
feed, params) plus one `GossipNode` (neighbours, exchanges, mixing). Before its
first update a peer runs one bootstrap round, so a late joiner adopts the
others' parameters instead of training from scratch. Dynamic sampling is the
algorithm's fragment filter, applied by the feed like any learner's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import torch

from .. import wire
from ..algos.base import GradReduce
from ..config.roles import EVALUATOR, PEER
from ..learning.gossip.node import GossipNode
from .learner import LearnerRole


class PeerRole(LearnerRole):
    """A decentralised learner: local PPO/DAPO updates plus gossip with neighbours."""

    name = PEER
    data_parallel = False  # a peer's group is its gossip neighbours

    async def setup(self) -> None:
        await super().setup()
        self.node = GossipNode(self.job, self.id, self.ctx.index, self.trainer,
                               self.ctx.transport, self.log, self.wire_stats,
                               spawn=lambda coro: self.tasks.create_task(coro),
                               publish=self.publish)
        self.endpoints["gossip"] = self.node.endpoint
        # same init everywhere (a common starting point), distinct randomness after it
        torch.manual_seed(self.job.experiment.seed * 1000 + self.ctx.index)

    def checkpoint_dir(self) -> Path:
        # peers of one job may share a host and a run folder: one folder each
        return Path(self.ctx.run_dir) / "checkpoints" / self.id

    def grad_reducer(self) -> GradReduce | None:
        G = self.job.gossip
        if G.mixing not in ("gradients", "async") or \
                (G.mixing == "async" and G.share == "experience"):
            return None  # no gradient is mixed

        # the node is built after the trainer, and is there before the first update
        def reduce(params: Any, scalars: dict[str, float]) -> dict[str, float]:
            mixer = self.node.grads or self.node.asyncg  # what the mixing mode built
            assert mixer is not None
            return mixer.reduce(params, scalars)

        return reduce

    def on_membership(self, members: dict[str, wire.Member]) -> None:
        super().on_membership(members)
        self.node.on_membership(members)

    async def after_update(self) -> None:
        await self.node.after_update()

    async def _train(self) -> None:
        await self.node.bootstrapped.wait()
        await super()._train()

    def tasks_to_run(self) -> list[Coroutine[Any, Any, None]]:
        return [self.node.serve(), self.node.bootstrap(), *super().tasks_to_run()]

    def finish_counts(self) -> dict[str, int]:
        return {**super().finish_counts(), **self.node.stats,
                "uninformative_dropped": self.feed.filtered}

    async def finish(self) -> None:
        """Done training: keep answering gossip and publishing final params; the
        evaluator ends the job when every peer is done (or, without one, the last
        peer to know that every peer it hears of is done)."""
        total = self.job.training.total_timesteps
        while not self.stop_event.is_set():
            await self.publish(final=True)
            if not self.members_of(EVALUATOR) and self.node.others_done(total):
                await self.job_shutdown("training_finished")
                return
            await asyncio.sleep(1.0)

    def metrics(self) -> dict[str, float]:
        out = super().metrics()
        out.update(self.node.metrics())
        out["gossip/uninformative_dropped"] = self.feed.filtered
        return out


ROLE = PeerRole
