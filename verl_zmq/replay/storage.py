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
        """Everything needed to restore the storage (for snapshots)."""
        out = {f"col/{k}": v[: self.size] if self.size < self.capacity else v
               for k, v in self.columns.items()}
        out["generation"] = self.generation
        out["counters"] = np.array([self.cursor, self.size, self.inserted], np.int64)
        return out
