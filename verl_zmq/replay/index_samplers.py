"""Which stored transitions a batch takes: uniformly, or by priority (PER,
Schaul et al. 2016: P(i) = p_i^alpha / sum p^alpha, importance weights
(N P(i))^-beta normalised by their max, beta annealed to 1)."""

from __future__ import annotations

import numpy as np

from .sumtree import SumTree


class UniformSampler:
    """Every stored transition equally likely; weights all 1."""

    def __init__(self, capacity: int, seed: int = 0):
        self.rng = np.random.default_rng(seed)

    def on_insert(self, idx: np.ndarray, priorities: np.ndarray | None = None) -> None:
        pass

    def sample(self, n: int, size: int, progress: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        return self.rng.integers(0, size, n), np.ones(n, np.float32)

    def update(self, idx: np.ndarray, priorities: np.ndarray) -> None:
        pass

    def state(self, size: int) -> dict[str, np.ndarray]:
        return {}

    def load_state(self, state: dict[str, np.ndarray], order: np.ndarray) -> None:
        pass


class PrioritizedSampler:
    """Proportional prioritisation on a SumTree."""

    def __init__(self, capacity: int, alpha: float = 0.6, beta: float = 0.4, eps: float = 1e-6,
                 seed: int = 0):
        self.tree = SumTree(capacity)
        self.alpha, self.beta0, self.eps = alpha, beta, eps
        self.max_priority = 1.0
        self.rng = np.random.default_rng(seed)

    def beta(self, progress: float) -> float:
        return self.beta0 + (1.0 - self.beta0) * min(1.0, max(0.0, progress))

    def on_insert(self, idx: np.ndarray, priorities: np.ndarray | None = None) -> None:
        """New items at the running max priority unless the sampler sent one."""
        if priorities is None:
            p = np.full(len(idx), self.max_priority)
        else:
            p = np.abs(np.asarray(priorities, np.float64)) + self.eps
            self.max_priority = max(self.max_priority, float(p.max(initial=0.0)))
        self.tree.update(idx, p ** self.alpha)

    def sample(self, n: int, size: int, progress: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        total = self.tree.total
        # stratified: one draw in each of n equal segments of the total
        bounds = (np.arange(n) + self.rng.random(n)) * (total / n)
        idx = np.minimum(self.tree.find(np.minimum(bounds, np.nextafter(total, 0))), size - 1)
        p = np.maximum(self.tree.get(idx), 1e-300)
        # w_i / max_j w_j = (N P_i)^-beta / (N P_min)^-beta = (p_min / p_i)^beta
        return idx, ((p.min() / p) ** self.beta(progress)).astype(np.float32)

    def update(self, idx: np.ndarray, priorities: np.ndarray) -> None:
        p = np.abs(np.asarray(priorities, np.float64)) + self.eps
        self.max_priority = max(self.max_priority, float(p.max(initial=0.0)))
        self.tree.update(idx, p ** self.alpha)

    def state(self, size: int) -> dict[str, np.ndarray]:
        """Leaf priorities (already raised to alpha) and the running max."""
        return {"priorities": self.tree.get(np.arange(size)),
                "max_priority": np.array([self.max_priority])}

    def load_state(self, state: dict[str, np.ndarray], order: np.ndarray) -> None:
        if "priorities" not in state:  # a uniform shard's snapshot: all at the max
            self.on_insert(np.arange(len(order)))
            return
        self.max_priority = float(state["max_priority"][0])
        self.tree.update(np.arange(len(order)), state["priorities"][order])
