"""The fragment: the one batch type of the on-policy data path, and the source
of the columns that off-policy transitions are unrolled from.

A fragment is T steps of E envs in columns, NEXT_STEP autoreset layout:

- `obs [T, E, *obs]` (a structured observation: one `obs.<key>` column per
  leaf, `envs/spaces.py`), `action [T, E]` (Discrete) or `[T, E, k]` (Box,
  MultiDiscrete, MultiBinary), `reward`, `terminated`, `truncated`,
  `valid [T, E]`;
- one `[T, E]` float column per algorithm extra (PPO: `logp`, `value`), each
  with its value after the last step in `bootstrap_<extra> [E]`, and
  `bootstrap_obs [E, *obs]` (the rule: every per-step column that a learner
  needs one step past the fragment has a `bootstrap_` twin);
- recurrent policies: `rnn_state [E, S]`, each env's policy state before the
  first step, and `first [T, E]` (the step starts an episode: the state is
  zeroed before it), with `bootstrap_first [E]`;
- a multi-agent policy's fragments: `agent [T, E]`, the index (in the env's
  `possible_agents`) of the agent each step was taken by, -1 on a padding
  step (no agent of this policy held that column then);
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

from .config import Job, Policy
from .envs.spaces import contains_problem, gather
from .envs.spec import EnvSpec

BASE = ("action", "reward", "terminated", "truncated", "valid")  # and the obs columns
STEPWISE = ("action", "terminated", "truncated", "valid")  # [T, E, ...] beside reward
STATE, FIRST = "rnn_state", "first"  # recurrent policies
PROMPT = "prompt"  # prompt jobs: [E, max_prompt_length] token ids, left-padded
AGENT = "agent"  # multi-agent policies: [T, E] the acting agent's index, -1: none
OBSERVED = "observed"  # multi-turn responses: [T, E] True where a tool wrote the token
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
    state_size: int = 0  # a recurrent policy's state per env (0: none)
    prompt_len: int = 0  # prompt jobs: each response's left-padded prompt (seq/prompts.py)
    agents: tuple[int, ...] = ()  # a multi-agent policy's agents (their indices); ()=none

    @property
    def obs_columns(self) -> tuple[str, ...]:
        return tuple(leaf.column for leaf in self.spec.leaves)

    @property
    def stepwise(self) -> tuple[str, ...]:
        """Every [T, E, ...] column an update reads."""
        return (*self.obs_columns, *BASE, *self.extras,
                *((FIRST,) if self.state_size else ()),
                *((OBSERVED,) if self.spec.observed else ()))

    @property
    def twinned(self) -> tuple[str, ...]:
        """Columns with a `bootstrap_` twin."""
        return (*self.obs_columns, *self.extras, *((FIRST,) if self.state_size else ()))

    @property
    def columns(self) -> tuple[str, ...]:
        """Per-step columns an update reads, then their bootstrap twins (and the
        recurrent state)."""
        return (*self.stepwise, *(bootstrap(k) for k in self.twinned),
                *((STATE,) if self.state_size else ()))

    def action_dtype(self) -> np.dtype[Any]:
        return np.dtype(np.float32 if self.spec.continuous else np.int64)

    def fields(self, E: int, obs_dtype: DType = np.float32, action_dtype: DType | None = None
               ) -> list[tuple[str, np.dtype[Any], tuple[int, ...]]]:
        """(name, dtype, shape) of every fixed column of a fragment of E envs, in the
        order they travel: the one declaration of the fragment's columns (samplers
        lay out their buffers with it; shards and learners check against it).
        `obs_dtype` is a plain observation's (uint8 images or float32); a
        structured one's leaves have their own."""
        T, s = self.T, self.spec
        act = np.dtype(action_dtype or self.action_dtype())
        f32, flag = np.dtype(np.float32), np.dtype(bool)
        if s.structured:
            obs = [(leaf.column, leaf.dtype, leaf.shape) for leaf in s.leaves]
        else:
            obs = [("obs", np.dtype(obs_dtype), s.obs_shape)]
        rec = bool(self.state_size)
        return [*[(k, dt, (T, E, *shape)) for k, dt, shape in obs],
                ("action", act, (T, E, *s.action_shape)),
                ("terminated", flag, (T, E)), ("truncated", flag, (T, E)),
                ("valid", flag, (T, E)), ("reward", f32, (T, E)),
                *[(k, f32, (T, E)) for k in self.extras],
                *([(FIRST, flag, (T, E))] if rec else []),
                *([(OBSERVED, flag, (T, E))] if s.observed else []),
                *[(bootstrap(k), dt, (E, *shape)) for k, dt, shape in obs],
                *[(bootstrap(k), f32, (E,)) for k in self.extras],
                *([(bootstrap(FIRST), flag, (E,)), (STATE, f32, (E, self.state_size))]
                  if rec else []),
                *([(PROMPT, np.dtype(np.int64), (E, self.prompt_len))]
                  if self.prompt_len else []),
                *([(AGENT, np.dtype(np.int64), (T, E))] if self.agents else [])]

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
        for k, dt, shape in self.fields(a["reward"].shape[1]):
            if k not in a:
                return f"missing array {k!r}"
            if tuple(a[k].shape) != shape:
                return f"{k} has shape {tuple(a[k].shape)}, expected {shape}"
            if self.spec.structured and k.startswith(("obs.", "bootstrap_obs.")) \
                    and a[k].dtype != dt:
                return f"{k} has dtype {a[k].dtype}, expected {dt}"
        if not values:
            return ""
        why = self.action_problem(a["action"])
        if why:
            return why
        if self.spec.structured:
            why = contains_problem(gather(a, self.spec.leaves), self.spec.leaves) \
                or contains_problem(gather(a, self.spec.leaves, "bootstrap_"), self.spec.leaves)
            if why:
                return why
        elif a["obs"].dtype != np.uint8 and (a["obs"].dtype.kind != "f"
                                             or not np.isfinite(a["obs"]).all()):
            return "obs is not finite floats or uint8 images"
        for k in ("reward", *self.extras, *((STATE,) if self.state_size else ())):
            if a[k].dtype.kind != "f" or not np.isfinite(a[k]).all():
                return f"{k} is not finite floats"
        return self._agent_problem(a) if self.agents else ""

    def _agent_problem(self, a: Mapping[str, np.ndarray]) -> str:
        """A multi-agent policy's `agent` column: its agents' indices, -1 on padding."""
        who = np.asarray(a[AGENT])
        if who.dtype.kind not in "iu":
            return f"{AGENT} is not integers"
        odd = np.setdiff1d(np.unique(who), np.array([-1, *self.agents]))
        if odd.size:
            return f"{AGENT} holds agents {odd[:4].tolist()} not mapped to this policy " \
                   f"(its agents: {list(self.agents)})"
        if (who[np.asarray(a["valid"], bool)] < 0).any():
            return f"valid steps with no {AGENT}"
        return ""

    def action_problem(self, act: np.ndarray) -> str:
        s = self.spec
        if s.continuous:
            return "" if act.dtype.kind == "f" else "actions are not floats"
        if act.dtype.kind not in "iu":
            return "actions are not integers"
        if not act.size:
            return ""
        high = {"discrete": s.n_actions - 1, "multibinary": 1}.get(s.kind)
        if high is not None:
            return "" if act.min() >= 0 and act.max() <= high else "actions out of range"
        if act.min() < 0 or (act >= np.asarray(s.nvec)).any():
            return "actions out of the MultiDiscrete range"
        return ""

    def concat(self, frags: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
        """Stack fragments side by side along the env axis: [T, sum E, ...]; only
        the columns an update reads travel on."""
        out = {k: np.concatenate([f[k] for f in frags], axis=1) for k in self.stepwise}
        for k in self.twinned:
            out[bootstrap(k)] = np.concatenate([f[bootstrap(k)] for f in frags])
        if self.state_size:
            out[STATE] = np.concatenate([f[STATE] for f in frags])
        if self.prompt_len:
            out[PROMPT] = np.concatenate([f[PROMPT] for f in frags])
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


def state_size(policy: Policy) -> int:
    """A recurrent policy's state per env: an LSTM's (h, c), a GRU's h; 0 without."""
    return {"": 0, "lstm": 2, "gru": 1}[policy.recurrent] * policy.recurrent_size


def job_layout(job: Job, spec: EnvSpec) -> Layout:
    """The fragment layout of a job for its env (generated responses: with their
    prompts, `EnvSpec.prompt_len`)."""
    return Layout(spec, job.sampling.fragment_length, job.traits.extras,
                  state_size(job.algorithm.policy), spec.prompt_len, spec.agents)
