"""What a gossip mixer (`RoundMixer`, `GradMixer`, `AsyncGradMixer`,
`ExperienceGossip`) needs of the peer it mixes for: its id, log and counters,
its neighbours and a socket to each, its own parameters and what they score.
`GossipNode` is the one implementation. `push` sends a message that wants no
reply to some neighbours without waiting; `keep_best` bounds what arrived by
`priority_fn`."""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import numpy as np
import zmq
import zmq.asyncio

from ... import wire
from ...comm.messaging import WireStats
from ...config import Job
from ..trainer import Trainer
from . import grad_codec


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
    size = grad_codec.nbytes(dict(getattr(msg, "arrays", {})))
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


class Arrival(Protocol):
    """What a bounded inbox orders by: the sender's recent return and when it came."""

    reward: float
    at: float


A = TypeVar("A", bound=Arrival)


def keep_best(inbox: deque[A], size: int, priority_fn: str) -> deque[A] | None:
    """`inbox` cut to its `size` best by `priority_fn` (the sender's reward, else the
    most recent); None while it is within `size`."""
    if len(inbox) <= size:
        return None
    key = (lambda a: a.reward) if priority_fn == "reward" else (lambda a: a.at)
    return deque(sorted(inbox, key=key, reverse=True)[:size])

