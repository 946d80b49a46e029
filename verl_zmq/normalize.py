"""Observation normalisation with running mean/std whose statistics travel with
the params: samplers report each fragment's raw moments, the learner merges
them (Chan et al.'s parallel algorithm) and publishes the merged statistics,
so samplers and the evaluator normalise alike. Reward scaling (on-policy
learners) is the learner's alone: rewards divided by the running standard
deviation of discounted returns, as gymnasium's NormalizeReward and SB3's
VecNormalize do."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class RunningMeanStd:
    """Mean and variance over every observation seen, mergeable across processes."""

    shape: tuple[int, ...]
    mean: np.ndarray = field(default=None)  # type: ignore[arg-type]  # zeros: set below
    var: np.ndarray = field(default=None)  # type: ignore[arg-type]  # ones: set below
    count: float = 0.0

    def __post_init__(self) -> None:
        if self.mean is None:
            self.mean = np.zeros(self.shape, np.float64)
        if self.var is None:
            self.var = np.ones(self.shape, np.float64)

    def merge(self, mean: np.ndarray, var: np.ndarray, count: float) -> None:
        """Fold in a batch's moments (population variance)."""
        if count <= 0:
            return
        if self.count == 0:
            self.mean, self.var, self.count = mean.astype(np.float64), var.astype(np.float64), count
            return
        total = self.count + count
        delta = mean - self.mean
        m2 = self.var * self.count + var * count + delta**2 * self.count * count / total
        self.mean = self.mean + delta * count / total
        self.var = m2 / total
        self.count = total

    def update(self, x: np.ndarray) -> None:
        x = x.reshape(-1, *self.shape).astype(np.float64)
        self.merge(x.mean(0), x.var(0), float(x.shape[0]))

    def normalize(self, x: np.ndarray, clip: float) -> np.ndarray:
        z = (x - self.mean) / np.sqrt(self.var + 1e-8)
        out: np.ndarray = np.clip(z, -clip, clip).astype(np.float32)
        return out

    def to_arrays(self, prefix: str = "obs_rms/") -> dict[str, np.ndarray]:
        return {f"{prefix}mean": self.mean.astype(np.float64),
                f"{prefix}var": self.var.astype(np.float64),
                f"{prefix}count": np.array([self.count], np.float64)}

    def load_arrays(self, arrays: Mapping[str, Any], prefix: str = "obs_rms/") -> bool:
        """Take statistics from a params message; False when they are absent or misshapen."""
        try:
            mean = np.asarray(arrays[f"{prefix}mean"], np.float64)
            var = np.asarray(arrays[f"{prefix}var"], np.float64)
            count = float(np.asarray(arrays[f"{prefix}count"]).reshape(-1)[0])
        except (KeyError, IndexError, ValueError):
            return False
        if mean.shape != self.shape or var.shape != self.shape:
            return False
        self.mean, self.var, self.count = mean.copy(), var.copy(), count
        return True

    def moments(self, raw: Sequence[np.ndarray], prefix: str = "rms_") -> dict[str, np.ndarray]:
        """The moments of a fragment's raw observations, one array per step."""
        return moments(np.stack(raw), self.shape, prefix)

    def merge_moments(self, arrays: Mapping[str, np.ndarray], prefix: str = "rms_") -> None:
        """Fold in a fragment's `moments`; misshapen ones are ignored."""
        try:
            mean, var = arrays[f"{prefix}mean"], arrays[f"{prefix}var"]
            count = float(arrays[f"{prefix}count"][0])
        except (KeyError, IndexError):
            return
        if mean.shape == self.shape and var.shape == self.shape and count > 0:
            self.merge(mean, var, count)


class LeafNorm:
    """Normalisation of a structured observation ({column: array}): a running
    mean and variance per Box leaf, the other leaves (images, indices, bits) as
    they are. Its arrays and moments are RunningMeanStd's, per column:
    `obs_rms/<column>/mean`, `rms_<column>/mean`."""

    def __init__(self, leaves: Sequence[Any]):
        self.rms = {leaf.column: RunningMeanStd(leaf.shape) for leaf in leaves
                    if leaf.kind == "box"}

    @property
    def count(self) -> float:
        """Observations seen (every Box leaf sees each)."""
        return max((r.count for r in self.rms.values()), default=0.0)

    def normalize(self, obs: Mapping[str, np.ndarray], clip: float) -> dict[str, np.ndarray]:
        return {k: self.rms[k].normalize(v, clip) if k in self.rms else v
                for k, v in obs.items()}

    def update(self, obs: Mapping[str, np.ndarray]) -> None:
        for k, r in self.rms.items():
            r.update(obs[k])

    def moments(self, raw: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for k, r in self.rms.items():
            out.update(r.moments([o[k] for o in raw], f"rms_{k}/"))
        return out

    def merge_moments(self, arrays: Mapping[str, np.ndarray]) -> None:
        for k, r in self.rms.items():
            r.merge_moments(arrays, f"rms_{k}/")

    def to_arrays(self, prefix: str = "obs_rms/") -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for k, r in self.rms.items():
            out.update(r.to_arrays(f"{prefix}{k}/"))
        return out

    def load_arrays(self, arrays: dict[str, Any], prefix: str = "obs_rms/") -> bool:
        return all([r.load_arrays(arrays, f"{prefix}{k}/") for k, r in self.rms.items()])


ObsNorm = RunningMeanStd | LeafNorm


def obs_norm(spec: Any) -> ObsNorm:
    """The observation statistics of an env (`EnvSpec`): one RunningMeanStd for a
    plain observation, a LeafNorm for a structured one."""
    return LeafNorm(spec.leaves) if spec.structured else RunningMeanStd(spec.obs_shape)


def moments(x: np.ndarray, shape: tuple[int, ...], prefix: str = "rms_"
            ) -> dict[str, np.ndarray]:
    """A fragment's raw-observation moments, as fragment arrays."""
    flat = x.reshape(-1, *shape).astype(np.float64)
    return {f"{prefix}mean": flat.mean(0), f"{prefix}var": flat.var(0),
            f"{prefix}count": np.array([flat.shape[0]], np.float64)}


def discounted_returns(reward: np.ndarray, done: np.ndarray, gamma: float) -> np.ndarray:
    """[T, N] returns accumulated forward within a batch, ret_t = gamma * ret_{t-1} *
    (1 - done_{t-1}) + r_t, starting at 0 at the batch's first step: what the
    reward scale is estimated from (each column is one env's consecutive steps)."""
    out = np.empty(reward.shape, np.float64)
    ret = np.zeros(reward.shape[1:], np.float64)
    for t in range(reward.shape[0]):
        ret = ret * gamma + reward[t]
        out[t] = ret
        ret = np.where(done[t], 0.0, ret)
    return out


def scale_rewards(batch: Mapping[str, np.ndarray], rms: RunningMeanStd, gamma: float,
                  clip: float) -> dict[str, np.ndarray]:
    """The batch with its rewards divided by the returns' running standard deviation
    (after folding this batch's returns into `rms`) and clipped to +-clip."""
    reward = np.asarray(batch["reward"], np.float64)
    done = np.asarray(batch["terminated"], bool) | np.asarray(batch["truncated"], bool)
    valid = np.asarray(batch.get("valid", np.ones(reward.shape, bool)), bool)
    rets = discounted_returns(np.where(valid, reward, 0.0), done | ~valid, gamma)
    if valid.any():
        rms.update(rets[valid])
    scaled = np.clip(reward / np.sqrt(rms.var + 1e-8), -clip, clip).astype(np.float32)
    return {**batch, "reward": scaled}
