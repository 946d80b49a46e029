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
from pathlib import Path

import torch

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

    def grad_reducer(self):
        if self.job.gossip.mixing != "gradients":
            return None
        # the node is built after the trainer, and is there before the first update
        return lambda params, scalars: self.node.grads.reduce(params, scalars)

    def on_membership(self, members) -> None:
        super().on_membership(members)
        self.node.on_membership(members)

    async def after_update(self) -> None:
        await self.node.after_update()

    async def _train(self) -> None:
        await self.node.bootstrapped.wait()
        await super()._train()

    def tasks_to_run(self) -> list:
        return [self.node.serve(), self.node.bootstrap(), *super().tasks_to_run()]

    def finish_counts(self) -> dict:
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
