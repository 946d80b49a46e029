"""A sum tree over priorities with vectorised batch updates and prefix search."""

from __future__ import annotations

import numpy as np

FANOUT = 16  # 16-ary: 5 levels for 1M leaves; each level is a few numpy calls per batch
FLAT = 4096  # levels this small are handled whole (one cumsum / one reshape-sum)


class SumTree:
    """Leaves hold priorities; each inner node the sum of its FANOUT children.

    `levels[0]` are the leaves (padded to a multiple of FANOUT), the last level is
    the root. A wide tree does a batch's descent in a few numpy calls per level
    over [batch, FANOUT] blocks, instead of ~20 tiny calls of a binary tree; the
    top levels (at most FLAT nodes) are searched with one cumsum + searchsorted
    and rebuilt whole on update, which is cheaper than walking them per batch.
    """

    def __init__(self, capacity: int, fanout: int = FANOUT):
        self.capacity = int(capacity)
        self.fanout = F = int(fanout)
        self.levels: list[np.ndarray] = []
        n = self.capacity
        while True:
            padded = -(-n // F) * F if n > 1 else 1
            self.levels.append(np.zeros(padded, np.float64))
            if n == 1:
                break
            n = padded // F
        # the widest level searched flat: everything above it is only kept for `total`
        self._top = next(i for i, lv in enumerate(self.levels) if len(lv) <= FLAT)
        # block @ upper = exclusive running sums (BLAS, fast): column j sums children < j
        self._upper = np.triu(np.ones((F, F)), k=1)

    @property
    def total(self) -> float:
        return float(self.levels[-1][0])

    def get(self, idx: np.ndarray) -> np.ndarray:
        out: np.ndarray = self.levels[0][np.asarray(idx)]
        return out

    def update(self, idx: np.ndarray, values: np.ndarray) -> None:
        idx = np.asarray(idx, np.int64)
        if idx.size == 0:
            return
        values = np.asarray(values, np.float64)
        F = self.fanout
        # the last write to a slot wins, as with sequential updates
        uniq, first = np.unique(idx[::-1], return_index=True)
        self.levels[0][uniq] = values[::-1][first]
        nodes = uniq
        for below, above in zip(self.levels[:-1], self.levels[1:]):
            if len(below) <= FLAT:  # small: rebuild the whole level in one call
                above[: len(below) // F] = below.reshape(-1, F).sum(axis=1)
                continue
            nodes = nodes // F  # repeated parents are harmless: same sum
            above[nodes] = below.reshape(-1, F)[nodes].sum(axis=1)

    def find(self, prefix: np.ndarray) -> np.ndarray:
        """For each prefix sum s in [0, total), the leaf i with cumsum[i-1] <= s < cumsum[i]."""
        s = np.asarray(prefix, np.float64).copy()
        F = self.fanout
        top = self.levels[self._top]
        cum = np.cumsum(top)
        node = np.minimum(np.searchsorted(cum, s, side="right"), len(top) - 1)
        s -= cum[node] - top[node]
        rows = np.arange(s.size)
        for i in range(self._top - 1, -1, -1):
            # rounding past the last real node: stay on one that has children
            node = np.minimum(node, len(self.levels[i]) // F - 1)
            block = self.levels[i].reshape(-1, F)[node]
            before = block @ self._upper
            # before[:, 0] == 0 <= s, so child is in [0, F)
            child = np.count_nonzero(before <= s[:, None], axis=1) - 1
            s -= before[rows, child]
            node = node * F + child
        # float rounding can land on an empty leaf past the end: clamp to a real one
        return np.minimum(node, self.capacity - 1)
