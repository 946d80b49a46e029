"""What a gossip mixer (`RoundMixer`, `GradMixer`, `AsyncGradMixer`,
`ExperienceGossip`) needs of the peer it mixes for: its id, log and counters,
its neighbours and a socket to each, its own parameters and what they score.
`GossipNode` is the one implementation. `push` sends a message that wants no
reply to some neighbours without waiting."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import numpy as np
import zmq
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


def push(node: MixNode, msg: wire.Message, to: list[str]) -> tuple[int, int, int]:
    """Send `msg` to each neighbour in `to` without waiting (no reply): (sent, dropped
    at a full or gone neighbour, bytes of its arrays sent)."""
    sent = dropped = nbytes = 0
    frames = None
    size = int(sum(np.asarray(v).nbytes for v in dict(getattr(msg, "arrays", {})).values()))
    for pid in to:
        try:
            sock = node.dealer(pid)
            if frames is None:
                msg.src, msg.seq = node.id, 0
                frames = wire.encode(msg)
            sock.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
            sent += 1
            nbytes += size
        except (zmq.Again, zmq.ZMQError, KeyError):
            dropped += 1
    return sent, dropped, nbytes

