"""Off-policy replay for one shard: ring storage + a sampler (uniform or
prioritised) + the replay-ratio limiter, fed with fragments unrolled into
n-step transitions. Each of a learner's credits is answered with one sampled
batch (importance weights, slot indices and their generations) when the
limiter allows; priority updates come back keyed by (index, generation), so an
update for a slot overwritten meanwhile is ignored. Inserts wait while the
limiter says the learner is behind. Numpy only."""

from __future__ import annotations

import time
from collections.abc import Mapping

import numpy as np

from .. import wire
from ..config import Job
from ..config.algorithms import n_step
from .index_samplers import PrioritizedSampler, UniformSampler
from .limiter import RateLimiter
from .storage import RingStorage
from .store import RejectedFragment
from .transitions import unroll


class OffPolicyStore:
    """What a uniform or prioritized shard holds, and how it samples."""

    persistent = True  # snapshots: the buffer survives a restart and a resumed job

    def __init__(self, job: Job, seed: int = 0):
        R, p = job.replay, job.algorithm.params
        self.gamma = p.gamma
        self.n_step = n_step(job)
        self.storage = RingStorage(R.capacity)
        self.sampler: PrioritizedSampler | UniformSampler
        if R.mode == "prioritized":
            self.sampler = PrioritizedSampler(R.capacity, R.alpha, R.beta, R.priority_eps, seed)
        else:
            self.sampler = UniformSampler(R.capacity, seed)
        self.limiter = RateLimiter(R.samples_per_insert, R.min_size_to_sample, R.error_buffer)
        self.beta_steps = max(1, R.beta_anneal_steps)
        self.env_steps = 0
        self.stale_updates = 0
        self.priority_updates = 0
        self.transitions_in = 0  # since this shard started (a restore counts as in)

    @property
    def size(self) -> int:
        return self.storage.size

    def transitions(self, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return unroll(arrays, self.gamma, self.n_step)

    # -- the shard's store interface (see roles/replay.py) ------------------------

    def prepare(self, frag: wire.Fragment) -> tuple[dict[str, np.ndarray], int]:
        """A fragment's n-step transitions and its env steps."""
        try:
            return self.transitions(frag.arrays), int(frag.arrays["reward"].size)
        except (KeyError, ValueError, IndexError, TypeError) as e:
            raise RejectedFragment(str(e)) from None

    def can_insert(self, item: tuple[dict[str, np.ndarray], int]) -> bool:
        return self.limiter.can_insert(len(item[0]["reward"]))

    def can_serve(self, batch_size: int) -> bool:
        return batch_size > 0 and self.limiter.can_sample(batch_size)

    def take(self, batch_size: int) -> wire.Batch:
        return wire.Batch(arrays=self.sample(batch_size), inserted_t=time.time())

    def untake(self, msg: wire.Batch) -> None:
        """A send failed: the sample is simply not used."""

    def update_priorities_msg(self, msg: wire.PriorityUpdate) -> str:
        """Apply a learner's priority update; a reason when it is malformed."""
        a = msg.arrays
        try:
            idx, gen, pr = a["index"], a["generation"], a["priority"]
            if not (idx.shape == gen.shape == pr.shape and idx.ndim == 1):
                return "index, generation and priority differ in shape"
            if idx.dtype.kind not in "iu" or gen.dtype.kind not in "iu" or pr.dtype.kind != "f":
                return "bad dtypes"
        except KeyError as e:
            return f"missing {e}"
        self.priority_updates += self.update_priorities(idx, gen, pr)
        return ""

    def metrics(self) -> dict[str, float]:
        s = self.storage
        return {"replay/size": s.size, "replay/capacity": s.capacity,
                "replay/transitions": self.transitions_in, "replay/env_steps": self.env_steps,
                "replay/sampled": self.limiter.sampled,
                "replay/priority_updates": self.priority_updates,
                "replay/stale_priority_updates": self.stale_updates}

    def insert(self, item: tuple[dict[str, np.ndarray], int]) -> int:
        tr, env_steps = item
        tr = dict(tr)
        prio = tr.pop("priority", None)
        n = len(tr["reward"])
        if n:
            try:
                idx = self.storage.add(tr)
            except ValueError as e:  # columns unlike the ones stored
                raise RejectedFragment(str(e)) from None
            self.sampler.on_insert(idx, prio)
        self.limiter.insert(n)
        self.env_steps += env_steps
        self.transitions_in += n
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

    def delta(self, since: int) -> dict[str, np.ndarray] | None:
        """What was inserted after the `since`-th transition, with every priority and
        the counters now: an incremental snapshot (None: take a full one)."""
        out = self.storage.delta(since)
        if out is None:
            return None
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
        self.transitions_in = self.storage.size
