"""Ring storage of transitions in preallocated numpy columns (no Python object per
transition). Every slot has a generation counter, bumped on each write, so a
priority update for a slot that was overwritten meanwhile can be recognised."""

from __future__ import annotations

import numpy as np


class RingStorage:
    """`capacity` transitions; columns allocated at the first insert from its arrays."""

    def __init__(self, capacity: int):
        self.capacity = int(capacity)
        self.columns: dict[str, np.ndarray] = {}
        self.generation = np.zeros(self.capacity, np.int64)
        self.cursor = 0
        self.size = 0
        self.inserted = 0

    def _allocate(self, batch: dict[str, np.ndarray]) -> None:
        for k, v in batch.items():
            self.columns[k] = np.zeros((self.capacity, *v.shape[1:]), v.dtype)

    def add(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        """Write N transitions (arrays with a leading N axis); return their slots."""
        n = len(next(iter(batch.values())))
        if not self.columns:
            self._allocate(batch)
        if set(batch) != set(self.columns):
            raise ValueError(f"columns {sorted(batch)} != stored {sorted(self.columns)}")
        if n > self.capacity:  # only the newest fit
            batch = {k: v[-self.capacity:] for k, v in batch.items()}
            n = self.capacity
        idx = (self.cursor + np.arange(n)) % self.capacity
        for k, v in batch.items():
            col = self.columns[k]
            if v.shape[1:] != col.shape[1:]:
                raise ValueError(f"column {k}: shape {v.shape[1:]} != {col.shape[1:]}")
            col[idx] = v
        self.generation[idx] += 1
        self.cursor = int((self.cursor + n) % self.capacity)
        self.size = min(self.capacity, self.size + n)
        self.inserted += n
        return idx

    def get(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        return {k: v[idx] for k, v in self.columns.items()}

    def state(self) -> dict[str, np.ndarray]:
        """Everything needed to restore the storage (copies: safe to write elsewhere)."""
        out = {f"col/{k}": v[: self.size].copy() for k, v in self.columns.items()}
        out["generation"] = self.generation[: self.size].copy()
        out["counters"] = np.array([self.cursor, self.size, self.inserted], np.int64)
        return out

    def delta(self, since: int) -> dict[str, np.ndarray] | None:
        """The writes after the `since`-th insert, with their slots and the counters
        now (copies): what `snapshot.apply_delta` puts over a state taken then. None
        when there is nothing new or the writes went round the whole ring (a full
        state is as small)."""
        n = self.inserted - since
        if n <= 0 or n >= self.capacity or not self.columns:
            return None
        slots = (self.cursor - n + np.arange(n)) % self.capacity
        out = {f"col/{k}": v[slots] for k, v in self.columns.items()}  # fancy indexing: copies
        out["slots"] = slots
        out["generation"] = self.generation[slots]
        out["counters"] = np.array([self.cursor, self.size, self.inserted], np.int64)
        out["since"] = np.array([since], np.int64)
        return out

    def load_state(self, state: dict[str, np.ndarray]) -> np.ndarray:
        """Restore from `state()`, oldest first from slot 0; a snapshot larger than this
        capacity keeps its newest. Returns the snapshot slots in their new order, so
        per-slot data kept elsewhere (priorities) can follow."""
        cursor, size, inserted = (int(x) for x in state["counters"])
        cols = {k[4:]: v for k, v in state.items() if k.startswith("col/")}
        if size == 0 or not cols:
            return np.zeros(0, np.int64)
        # write order: when full the oldest slot is the cursor's; otherwise cursor == size
        order = np.roll(np.arange(size), -cursor)[-self.capacity:]
        self._allocate({k: v[:1] for k, v in cols.items()})
        n = len(order)
        for k, v in cols.items():
            self.columns[k][:n] = v[order]
        self.generation[:n] = state["generation"][order]
        self.cursor = n % self.capacity
        self.size = n
        self.inserted = inserted
        return order
