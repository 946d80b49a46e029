"""What a gossip mixer (`RoundMixer`, `GradMixer`) needs of the peer it mixes
for: its id, log and counters, its neighbours and a socket to each, its own
parameters and what they score. `GossipNode` is the one implementation."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import numpy as np
import zmq.asyncio

from ... import wire
from ...comm.messaging import WireStats
from ...config import Job
from ..trainer import Trainer


class MixNode(Protocol):
    """A peer as its mixers see it."""

    id: str
    job: Job
    log: Any
    wire_stats: WireStats
    trainer: Trainer
    publish: Callable[[], Awaitable[None]]  # this peer's params, a new version after a mix

    @property
    def peers(self) -> dict[str, wire.Member]:
        """The neighbours it knows, by id."""

    def dealer(self, pid: str) -> zmq.asyncio.Socket:
        """The socket that reaches neighbour `pid`."""

    def own_arrays(self) -> dict[str, np.ndarray]:
        """This peer's parameters (and observation statistics), as they travel."""

    def fingerprint(self) -> str:
        """A short digest of `own_arrays()`."""

    def reward(self) -> float:
        """This peer's recent mean return."""

