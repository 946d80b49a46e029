"""What a replay shard's store is: the `Store` protocol that the shard shell
(`roles/replay.py`) drives, one interface for every `replay.mode`, and the one
exception a store raises for a fragment it cannot take."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from .. import wire


class RejectedFragment(ValueError):
    """A fragment the store cannot take (columns missing, misshapen, or unlike
    what it already holds): the shard counts it and drops it."""


class Store(Protocol):
    """A shard's store. `prepare` turns a fragment into what `insert` takes,
    raising `RejectedFragment` (so does `insert`, for columns unlike the stored
    ones); `take` serves a batch (`untake` when sending it failed)."""

    persistent: bool  # kept in snapshots: `state()` / `load_state()` apply
    env_steps: int  # env steps of what it has taken (0 where it does not count them)

    @property
    def size(self) -> int:
        """Items held: fragments (FIFO) or transitions (off-policy)."""

    def prepare(self, frag: wire.Fragment) -> Any: ...

    def can_insert(self, item: Any) -> bool: ...

    def insert(self, item: Any) -> int | None: ...

    def can_serve(self, batch_size: int) -> bool: ...

    def take(self, batch_size: int) -> wire.Batch: ...

    def untake(self, msg: wire.Batch) -> None: ...

    def update_priorities_msg(self, msg: wire.PriorityUpdate) -> str:
        """Apply a learner's priority update; the reason when it cannot be ("")."""

    def metrics(self) -> dict[str, float]: ...

    def state(self) -> dict[str, np.ndarray]: ...

    def delta(self, since: int) -> dict[str, np.ndarray] | None:
        """An incremental snapshot: what came after the `since`-th insert (None: a
        full `state()` is needed)."""

    def load_state(self, state: dict[str, np.ndarray]) -> None: ...
