"""A sum tree over priorities with vectorised batch updates and prefix search."""

from __future__ import annotations

import numpy as np


class SumTree:
    """Leaves hold priorities; each inner node the sum of its two children.

    Stored as one array of 2 * L floats (L = capacity rounded up to a power of
    two), root at 1. `update` writes many leaves and repairs their ancestors one
    level at a time; `find` descends for many prefix sums at once.
    """

    def __init__(self, capacity: int):
        self.capacity = int(capacity)
        self.leaves = 1 << max(0, (self.capacity - 1).bit_length())
        self.tree = np.zeros(2 * self.leaves, np.float64)
        self.depth = self.leaves.bit_length() - 1

    @property
    def total(self) -> float:
        return float(self.tree[1])

    def get(self, idx: np.ndarray) -> np.ndarray:
        return self.tree[self.leaves + np.asarray(idx)]

    def update(self, idx: np.ndarray, values: np.ndarray) -> None:
        idx = np.asarray(idx, np.int64)
        values = np.asarray(values, np.float64)
        if idx.size == 0:
            return
        # the last write to a slot wins, as with sequential updates
        rev_unique, first = np.unique(idx[::-1], return_index=True)
        pos = self.leaves + rev_unique
        self.tree[pos] = values[::-1][first]
        nodes = np.unique(pos >> 1)
        while nodes[0] >= 1:
            self.tree[nodes] = self.tree[2 * nodes] + self.tree[2 * nodes + 1]
            if nodes[0] == 1:
                break
            nodes = np.unique(nodes >> 1)

    def find(self, prefix: np.ndarray) -> np.ndarray:
        """For each prefix sum s in [0, total), the leaf i with cumsum[i-1] <= s < cumsum[i]."""
        s = np.asarray(prefix, np.float64).copy()
        node = np.ones(s.shape, np.int64)
        for _ in range(self.depth):
            left = 2 * node
            lsum = self.tree[left]
            right = s >= lsum
            s = np.where(right, s - lsum, s)
            node = np.where(right, left + 1, left)
        leaf = node - self.leaves
        # float rounding can land on an empty leaf past the end: clamp to a real one
        return np.minimum(leaf, self.capacity - 1)
