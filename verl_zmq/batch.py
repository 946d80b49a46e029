"""The fragment: the one batch type of the on-policy data path, and the source
of the columns that off-policy transitions are unrolled from.

A fragment is T steps of E envs in columns, NEXT_STEP autoreset layout:

- `obs [T, E, *obs]`, `action [T, E]` (discrete) or `[T, E, n]`, `reward`,
  `terminated`, `truncated`, `valid [T, E]`;
- one `[T, E]` float column per algorithm extra (PPO: `logp`, `value`), each
  with its value after the last step in `bootstrap_<extra> [E]`, and
  `bootstrap_obs [E, *obs]` (the rule: every per-step column that a learner
  needs one step past the fragment has a `bootstrap_` twin);
- optional: `ep_return`, `ep_length` (episodes finished in it), `priority`
  (actor-side initial priorities), `rms_*` (observation moments).

This module owns those names, validation (a shard validates once, on arrival)
and concatenation (a learner stacks fragments side by side). Numpy only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .envs.make import EnvSpec

BASE = ("obs", "action", "reward", "terminated", "truncated", "valid")
STEPWISE = ("obs", "action", "terminated", "truncated", "valid")  # [T, E, ...] beside reward
DType = type | np.dtype[Any] | str


def bootstrap(column: str) -> str:
    """The name of a column's value one step past the fragment."""
    return f"bootstrap_{column}"


def steps(arrays: Mapping[str, np.ndarray]) -> int:
    """Env steps a fragment holds (valid or not: the envs did step)."""
    return int(arrays["reward"].size)


def shape_problem(arrays: Mapping[str, np.ndarray]) -> str:
    """What a shard can check knowing no env: the base columns, all [T, E, ...]."""
    for k in BASE:
        if k not in arrays:
            return f"missing array {k!r}"
    te = arrays["reward"].shape
    if len(te) != 2 or te[0] == 0 or te[1] == 0:
        return f"reward has shape {te}, expected [T, E]"
    for k in STEPWISE:
        if arrays[k].shape[:2] != te:
            return f"{k} has shape {arrays[k].shape}, expected [{te[0]}, {te[1]}, ...]"
    return ""


@dataclass(frozen=True)
class Layout:
    """The fragments of one job: its env's spaces, fragment length and extras."""

    spec: EnvSpec
    T: int
    extras: tuple[str, ...] = ()

    @property
    def columns(self) -> tuple[str, ...]:
        """Per-step columns an update reads, then their bootstrap twins."""
        return (*BASE, *self.extras, *(bootstrap(k) for k in ("obs", *self.extras)))

    def fields(self, E: int, obs_dtype: DType = np.float32, action_dtype: DType | None = None
               ) -> list[tuple[str, np.dtype[Any], tuple[int, ...]]]:
        """(name, dtype, shape) of every fixed column of a fragment of E envs, in the
        order they travel: the one declaration of the fragment's columns (samplers
        lay out their buffers with it; shards and learners check against it)."""
        T, s = self.T, self.spec
        act = np.dtype(action_dtype or (np.int64 if s.discrete else np.float32))
        obs = np.dtype(obs_dtype)
        f32, flag = np.dtype(np.float32), np.dtype(bool)
        return [("obs", obs, (T, E, *s.obs_shape)),
                ("action", act, (T, E) if s.discrete else (T, E, s.n_actions)),
                ("terminated", flag, (T, E)), ("truncated", flag, (T, E)),
                ("valid", flag, (T, E)), ("reward", f32, (T, E)),
                *[(k, f32, (T, E)) for k in self.extras],
                (bootstrap("obs"), obs, (E, *s.obs_shape)),
                *[(bootstrap(k), f32, (E,)) for k in self.extras]]

    def shapes(self, E: int) -> dict[str, tuple[int, ...]]:
        return {name: shape for name, _, shape in self.fields(E)}

    def queue_bytes(self, E: int) -> int:
        """Kernel buffer for a fragment link: about two fragments of E envs (4 bytes
        an element, at least 2 KiB), so that what waits between a sampler and its
        shard is a few fragments, not seconds of experience from old policies."""
        elements = sum(int(np.prod(s)) for s in self.shapes(E).values())
        return max(2048, 2 * 4 * elements)

    def problem(self, a: Mapping[str, np.ndarray], values: bool = True) -> str:
        """Does a fragment fit this job's env and algorithm? Empty when it does.
        `values=False` checks names and shapes only (what a learner re-checks of a
        fragment its shard validated whole)."""
        why = shape_problem(a)
        if why:
            return why
        for k, shape in self.shapes(a["reward"].shape[1]).items():
            if k not in a:
                return f"missing array {k!r}"
            if tuple(a[k].shape) != shape:
                return f"{k} has shape {tuple(a[k].shape)}, expected {shape}"
        if not values:
            return ""
        if self.spec.discrete:
            act = a["action"]
            out_of_range = act.size and (act.min() < 0 or act.max() >= self.spec.n_actions)
            if act.dtype.kind not in "iu" or out_of_range:
                return "actions out of the discrete range"
        if a["obs"].dtype != np.uint8 and (a["obs"].dtype.kind != "f"
                                           or not np.isfinite(a["obs"]).all()):
            return "obs is not finite floats or uint8 images"
        for k in ("reward", *self.extras):
            if a[k].dtype.kind != "f" or not np.isfinite(a[k]).all():
                return f"{k} is not finite floats"
        return ""

    def concat(self, frags: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
        """Stack fragments side by side along the env axis: [T, sum E, ...]; only
        the columns an update reads travel on."""
        out = {k: np.concatenate([f[k] for f in frags], axis=1) for k in (*BASE, *self.extras)}
        for k in ("obs", *self.extras):
            out[bootstrap(k)] = np.concatenate([f[bootstrap(k)] for f in frags])
        return out


def episodes(terminated: np.ndarray, truncated: np.ndarray, valid: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    """Per step [T, N]: which episode of its column it belongs to (0, 1, ...), and
    per (column, episode) [N, K]: 1 if it ended terminated, 2 truncated, 0 not
    within the batch."""
    ended = (terminated | truncated) & valid
    ordinal = np.cumsum(ended, axis=0) - ended  # ends strictly before this step
    K = int(ordinal.max()) + 1 if ordinal.size else 1
    how = np.zeros((terminated.shape[1], K), np.int8)
    t, n = np.nonzero(ended)
    how[n, ordinal[t, n]] = np.where(truncated[t, n], 2, 1)
    return ordinal, how


def job_layout(job, spec: EnvSpec) -> Layout:
    """The fragment layout of a job for its env."""
    return Layout(spec, job.sampling.fragment_length, job.traits.extras)
