"""An env's side of gymnasium's API, checked where the job meets it.

`Contract` wraps every env the job makes (`make.make_env`): `reset` must return
`(obs, info)` and `step` five values, and every observation must have the
structure of the observation space (a Dict's keys, a Tuple's length, each
array's shape). A broken env then fails at its first bad answer with a message
that names the env, the key and both shapes, instead of deep inside a vector
env's `concatenate`. The check is structural and cheap (a shape compare per
leaf); bounds and dtypes are left to gymnasium's own checker.

`probe` is what `verl check`, `--dry-run` and the launcher run before anything
starts: one env reset and stepped with random actions for a bounded time.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

PROBE_STEPS = 1000  # random steps `probe` takes at most ...
PROBE_S = 3.0  # ... and for at most this long (at least PROBE_MIN_STEPS)
PROBE_MIN_STEPS = 20


class ContractError(ValueError):
    """An env that answered outside gymnasium's API; the message says where."""


def mismatch(obs: Any, space: gym.Space[Any], at: str = "obs") -> str:
    """How `obs` differs from `space`'s structure ("" when it fits)."""
    if isinstance(space, gym.spaces.Dict):
        return _dict_mismatch(obs, space, at)
    if isinstance(space, gym.spaces.Tuple):
        if not isinstance(obs, tuple | list) or len(obs) != len(space.spaces):
            n = len(obs) if isinstance(obs, tuple | list) else type(obs).__name__
            return f"{at}: got {n} entries, the space is a Tuple of {len(space.spaces)}"
        for i, sub in enumerate(space.spaces):
            if why := mismatch(obs[i], sub, f"{at}[{i}]"):
                return why
        return ""
    if isinstance(space, gym.spaces.Discrete):
        if np.ndim(obs) != 0:
            return f"{at}: got shape {np.shape(obs)}, the space is Discrete (one integer)"
        return ""
    shape = getattr(space, "shape", None)
    if shape is not None and isinstance(obs, Mapping | str | type(None)):
        return f"{at}: got {type(obs).__name__}, the space is {type(space).__name__}{shape}"
    if shape is not None and np.shape(obs) != tuple(shape):
        return f"{at}: got shape {np.shape(obs)}, space {tuple(shape)}"
    return ""


def _dict_mismatch(obs: Any, space: gym.spaces.Dict, at: str) -> str:
    if not isinstance(obs, Mapping):
        return f"{at}: got {type(obs).__name__}, the space is a Dict ({_keys(space)})"
    missing = [k for k in space.spaces if k not in obs]
    if missing:
        return (f"{at}[{missing[0]!r}]: missing (the space has keys {_keys(space)}, "
                f"got {', '.join(map(str, obs)) or 'none'})")
    extra = [k for k in obs if k not in space.spaces]
    if extra:
        return f"{at}[{extra[0]!r}]: not in the space (its keys: {_keys(space)})"
    for k, sub in space.spaces.items():
        if why := mismatch(obs[k], sub, f"{at}[{k!r}]"):
            return why
    return ""


def _keys(space: gym.spaces.Dict) -> str:
    return ", ".join(map(str, space.spaces))


class Contract(gym.Wrapper):
    """Checks each answer of the env it wraps against gymnasium's API and the
    observation space; a ContractError names `name` (the job's env id)."""

    def __init__(self, env: gym.Env, name: str):
        super().__init__(env)
        self.name = name

    def _check(self, obs: Any, call: str) -> None:
        if why := mismatch(obs, self.observation_space):
            raise ContractError(f"environment {self.name!r}: {call} returned {why}")

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        out = self.env.reset(seed=seed, options=options)
        if not isinstance(out, tuple) or len(out) != 2:
            raise ContractError(
                f"environment {self.name!r}: reset() returned "
                f"{_count(out)}; gymnasium's reset returns (obs, info): return "
                f"`obs, {{}}`")
        self._check(out[0], "reset()")
        return out

    def step(self, action: Any) -> Any:
        out = self.env.step(action)
        if not isinstance(out, tuple) or len(out) != 5:
            old = isinstance(out, tuple) and len(out) == 4
            raise ContractError(
                f"environment {self.name!r}: step() returned {_count(out)}"
                + (" (obs, reward, done, info: the gym API before 0.26)" if old else "")
                + "; gymnasium's step returns (obs, reward, terminated, truncated, info): "
                  "split `done` into terminated (the episode ended) and truncated (a "
                  "time limit cut it)")
        self._check(out[0], "step()")
        return out


def under_wrappers(env: gym.Env, name: str) -> gym.Env:
    """`env` with a Contract put directly around the env itself, beneath every
    wrapper (gymnasium's own included: its time limit would otherwise be the first
    to meet an old 4-value step, and fail on it without saying why)."""
    if not isinstance(env, gym.Wrapper):
        return Contract(env, name)
    w = env
    while isinstance(w.env, gym.Wrapper):
        w = w.env
    w.env = Contract(w.env, name)
    return env


def _count(out: Any) -> str:
    return f"{len(out)} values" if isinstance(out, tuple) else f"a {type(out).__name__}"


def probe(env: gym.Env, seed: int, steps: int = PROBE_STEPS, seconds: float = PROBE_S) -> int:
    """Reset `env` and take random steps (a new episode after each end) for at most
    `steps` steps and `seconds` (at least PROBE_MIN_STEPS); the steps taken. Raises
    what the env raises, a ContractError for an answer outside the API."""
    env.action_space.seed(seed)
    env.reset(seed=seed)
    deadline = time.monotonic() + seconds
    for i in range(steps):
        if i >= PROBE_MIN_STEPS and time.monotonic() > deadline:
            return i
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            env.reset()
    return steps
