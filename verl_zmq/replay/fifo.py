"""On-policy replay: a bounded FIFO of fragments, each served once, oldest first.

When full it refuses inserts (the shard stops reading, samplers block on their
PUSH high-water mark) or, with `replay.when_full = "drop_oldest"`, drops and
counts the oldest fragment.
"""

from __future__ import annotations

import time
from collections import deque

import numpy as np

from .. import wire


class FifoStore:
    """A bounded FIFO of fragments: the store of a FIFO shard."""

    persistent = False  # fragments are served once and soon: no snapshots
    env_steps = 0  # not counted: the learner counts the steps of what it trains on

    def __init__(self, capacity_fragments: int, drop_oldest: bool = False):
        self.capacity = max(1, capacity_fragments)
        self.drop_oldest = drop_oldest
        self.items: deque[tuple[wire.Fragment, float]] = deque()
        self.dropped = 0

    def __len__(self) -> int:
        return len(self.items)

    @property
    def size(self) -> int:
        return len(self.items)

    @property
    def full(self) -> bool:
        return len(self.items) >= self.capacity

    def prepare(self, frag: wire.Fragment) -> wire.Fragment:
        return frag

    def can_insert(self, frag: wire.Fragment) -> bool:
        return self.drop_oldest or not self.full

    def insert(self, frag: wire.Fragment) -> None:  # the fragment is taken whole
        if self.full:
            self.items.popleft()
            self.dropped += 1
        self.items.append((frag, time.time()))

    def can_serve(self, batch_size: int) -> bool:
        """One fragment per credit, whatever the learner's batch size."""
        return bool(self.items)

    def take(self, batch_size: int) -> wire.Batch:
        frag, inserted = self.items.popleft()
        return wire.Batch(version=frag.version, inserted_t=inserted, sampler=frag.src,
                          sampler_seq=frag.seq, arrays=frag.arrays)

    def untake(self, msg: wire.Batch) -> None:
        """A send failed (the learner is gone): keep the fragment, first in line."""
        frag = wire.Fragment(version=msg.version, arrays=msg.arrays)
        frag.src, frag.seq = msg.sampler, msg.sampler_seq
        self.items.appendleft((frag, msg.inserted_t))

    def update_priorities_msg(self, msg: wire.PriorityUpdate) -> str:
        return "a FIFO shard keeps no priorities"

    def metrics(self) -> dict[str, float]:
        return {"replay/size": len(self.items), "replay/capacity": self.capacity,
                "replay/dropped": self.dropped}

    def state(self) -> dict[str, np.ndarray]:
        raise NotImplementedError("a FIFO shard is not persistent")

    def delta(self, since: int) -> dict[str, np.ndarray] | None:
        raise NotImplementedError("a FIFO shard is not persistent")

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        raise NotImplementedError("a FIFO shard is not persistent")
