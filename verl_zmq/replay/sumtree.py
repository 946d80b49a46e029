"""A sum tree over priorities with vectorised batch updates and prefix search."""

from __future__ import annotations

import numpy as np

FANOUT = 16  # 16-ary: 5 levels for 1M leaves; each level is a few numpy calls per batch


class SumTree:
    """Leaves hold priorities; each inner node the sum of its FANOUT children.

    `levels[0]` are the leaves (padded to a multiple of FANOUT), the last level is
    the root. A wide tree does a batch's descent in a few numpy calls per level
    over [batch, FANOUT] blocks, instead of ~20 tiny calls of a binary tree.
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
        self._block = np.arange(F)
        self._upper = np.triu(np.ones((F, F)))  # block @ upper = running sums (BLAS, fast)

    @property
    def total(self) -> float:
        return float(self.levels[-1][0])

    def get(self, idx: np.ndarray) -> np.ndarray:
        return self.levels[0][np.asarray(idx)]

    def update(self, idx: np.ndarray, values: np.ndarray) -> None:
        idx = np.asarray(idx, np.int64)
        if idx.size == 0:
            return
        values = np.asarray(values, np.float64)
        # the last write to a slot wins, as with sequential updates
        uniq, first = np.unique(idx[::-1], return_index=True)
        self.levels[0][uniq] = values[::-1][first]
        nodes = uniq
        for below, above in zip(self.levels[:-1], self.levels[1:]):
            nodes = nodes // self.fanout  # repeated parents are harmless: same sum
            above[nodes] = below[(nodes * self.fanout)[:, None] + self._block].sum(axis=1)

    def find(self, prefix: np.ndarray) -> np.ndarray:
        """For each prefix sum s in [0, total), the leaf i with cumsum[i-1] <= s < cumsum[i]."""
        s = np.asarray(prefix, np.float64).copy()
        node = np.zeros(s.shape, np.int64)
        rows = np.arange(s.size)
        for i in range(len(self.levels) - 2, -1, -1):
            level = self.levels[i]
            block = level[(node * self.fanout)[:, None] + self._block]
            cum = block @ self._upper
            child = np.minimum(np.count_nonzero(cum <= s[:, None], axis=1), self.fanout - 1)
            s -= cum[rows, child] - block[rows, child]
            node = node * self.fanout + child
            if i > 0:  # rounding past the last real node: stay on one that has children
                node = np.minimum(node, len(self.levels[i - 1]) // self.fanout - 1)
        # float rounding can land on an empty leaf past the end: clamp to a real one
        return np.minimum(node, self.capacity - 1)
