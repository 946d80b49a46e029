"""What a learner's feed is: the `Feed` protocol that the trainer's loop reads
(`FragmentFeed` and `SampledFeed` implement it; `feeds.make_feed` picks one)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

import numpy as np

from .links import ShardAddress

if TYPE_CHECKING:  # torch stays out of the feeds' imports
    from ..algos.base import Learned

Arrays = Mapping[str, np.ndarray]


class Feed(Protocol):
    """Where a trainer's batches come from. It reads the trainer's counters and
    never writes them: it reports what it delivered (`env_steps`, the counts)."""

    dropped: int  # fragments dropped for policy lag
    rejected: int  # fragments or batches refused for their shape or values
    filtered: int  # fragments the algorithm's filter left out (dynamic sampling)

    def attach(self, tasks: asyncio.TaskGroup) -> None:
        """Run the shard readers in the role's task group."""

    async def reconcile(self, wanted: dict[str, ShardAddress]) -> None:
        """Follow the group's shards: connect new ones, drop gone or restarted ones."""

    async def resync(self) -> None:
        """A wait for a batch stalled: reconnect to the shards with fresh credits."""

    def shards(self) -> list[str]:
        """The shards it reads from now."""

    async def next(self) -> Arrays | None:
        """The next batch, or None when nothing usable came (ask again)."""

    async def done(self, learned: Learned | None) -> None:
        """The batch was learned from (None: not trained on): give back what is owed."""

    def env_steps(self, known: int) -> int:
        """The job's env steps, given the trainer's count `known`."""

    def drain(self) -> None:
        """Training is over: take nothing more."""

    def metrics(self, r: str) -> dict[str, object]:
        """The feed's counters, keyed under the role's metric prefix `r`."""
