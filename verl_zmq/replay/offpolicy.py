"""Off-policy replay for one shard: ring storage + a sampler (uniform or
prioritised) + the replay-ratio limiter, fed with fragments unrolled into
n-step transitions. Numpy only."""

from __future__ import annotations

import numpy as np

from ..config import Job
from .limiter import RateLimiter
from .samplers import PrioritizedSampler, UniformSampler
from .storage import RingStorage
from .transitions import unroll


class OffPolicyStore:
    """What a uniform or prioritized shard holds, and how it samples."""

    def __init__(self, job: Job, seed: int = 0):
        R, p = job.replay, job.algorithm.params
        self.gamma = p.gamma
        self.n_step = getattr(p, "n_step", 1)
        self.storage = RingStorage(R.capacity)
        if R.mode == "prioritized":
            self.sampler = PrioritizedSampler(R.capacity, R.alpha, R.beta, R.priority_eps, seed)
        else:
            self.sampler = UniformSampler(R.capacity, seed)
        self.limiter = RateLimiter(R.samples_per_insert, R.min_size_to_sample, R.error_buffer)
        self.beta_steps = max(1, R.beta_anneal_steps)
        self.env_steps = 0
        self.stale_updates = 0

    def transitions(self, arrays) -> dict[str, np.ndarray]:
        return unroll(arrays, self.gamma, self.n_step)

    def insert(self, tr: dict[str, np.ndarray], env_steps: int) -> int:
        prio = tr.pop("priority", None)
        n = len(tr["reward"])
        if n:
            idx = self.storage.add(tr)
            self.sampler.on_insert(idx, prio)
        self.limiter.insert(n)
        self.env_steps += env_steps
        return n

    def sample(self, n: int) -> dict[str, np.ndarray]:
        progress = self.env_steps / self.beta_steps
        idx, w = self.sampler.sample(n, self.storage.size, progress)
        out = self.storage.get(idx)
        out["weight"] = w
        out["index"] = idx.astype(np.int64)
        out["generation"] = self.storage.generation[idx].copy()
        out["env_steps"] = np.array([self.env_steps], np.int64)
        out["size"] = np.array([self.storage.size], np.int64)
        self.limiter.sample(n)
        return out

    def update_priorities(self, index: np.ndarray, generation: np.ndarray,
                          priority: np.ndarray) -> int:
        """Apply updates whose slot was not overwritten since it was sampled; count the rest."""
        index = np.asarray(index, np.int64)
        ok = (index >= 0) & (index < self.storage.capacity)
        ok[ok] &= self.storage.generation[index[ok]] == np.asarray(generation)[ok]
        ok &= np.isfinite(priority)
        self.stale_updates += int((~ok).sum())
        self.sampler.update(index[ok], np.asarray(priority)[ok])
        return int(ok.sum())

    def state(self) -> dict[str, np.ndarray]:
        """Storage, priorities and counters: what a snapshot holds (all copies)."""
        out = self.storage.state()
        out.update({f"sampler/{k}": v for k, v in
                    self.sampler.state(self.storage.size).items()})
        out["store_counters"] = np.array([self.env_steps, self.stale_updates,
                                          self.limiter.inserted, self.limiter.sampled], np.int64)
        return out

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        order = self.storage.load_state(state)
        self.sampler.load_state({k[8:]: v for k, v in state.items()
                                 if k.startswith("sampler/")}, order)
        self.env_steps, self.stale_updates, self.limiter.inserted, self.limiter.sampled = (
            int(x) for x in state["store_counters"])
