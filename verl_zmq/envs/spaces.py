"""Observation and action spaces as the rest of the system sees them. Numpy only.

An observation space becomes a tuple of leaves, one per array it holds. A Box
is one leaf; Dict and Tuple spaces, nested, are one leaf per sub-space, each
travelling as its own typed column of a fragment: `obs` for a plain
observation, `obs.<key>` (`obs.pos.x`, `obs.0` for a Tuple's first entry)
inside a Dict or Tuple. Each leaf has a kind that says how it is stored and
encoded:

- "box": float32, normalised per element where `environment.normalize_obs` is
  on, flattened into the features;
- "image": uint8 (H, W, C) boxes, stored as they are, encoded by a
  convolutional encoder (torch only);
- "discrete": int64 indices, one-hot in the features;
- "binary": int8 MultiBinary vectors, as floats in the features.

Inside a role a structured observation is a dict {column: array}; a plain Box
observation is the array itself, as it always was. The features a flat (MLP)
policy reads are the leaves' features concatenated, as Stable-Baselines3's
CombinedExtractor does, so samplers of MLP policies stay torch-free.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

Obs = Any  # np.ndarray (plain) or dict[str, np.ndarray] (structured)

_DTYPES: dict[str, np.dtype[Any]] = {"box": np.dtype(np.float32), "image": np.dtype(np.uint8),
           "discrete": np.dtype(np.int64), "binary": np.dtype(np.int8)}


class SpaceError(ValueError):
    """A space the system cannot take; the message names it."""


@dataclass(frozen=True)
class Leaf:
    """One array of an observation: where it sits in the space (`path`), how it is
    stored and encoded (`kind`), its per-env shape and, discrete, its size."""

    path: tuple[str, ...]
    kind: str
    shape: tuple[int, ...]
    n: int = 0

    @property
    def column(self) -> str:
        return ".".join(("obs", *self.path))

    @property
    def dtype(self) -> np.dtype[Any]:
        return _DTYPES[self.kind]

    @property
    def width(self) -> int:
        """Features this leaf gives a flat policy (images: none, they are encoded)."""
        if self.kind == "image":
            return 0
        return self.n if self.kind == "discrete" else int(np.prod(self.shape, dtype=np.int64))


def _is_image(space: gym.spaces.Box) -> bool:
    return space.dtype == np.uint8 and len(space.shape) == 3


def obs_leaves(space: gym.Space[Any], where: str = "observation space") -> tuple[Leaf, ...]:
    """The leaves of an observation space, in a fixed order (Dict keys as the space
    orders them, Tuple entries by index); SpaceError for a space with no leaf kind."""
    out: list[Leaf] = []

    def walk(s: gym.Space[Any], path: tuple[str, ...]) -> None:
        if isinstance(s, gym.spaces.Box):
            out.append(Leaf(path, "image" if _is_image(s) else "box", tuple(s.shape)))
        elif isinstance(s, gym.spaces.Discrete):
            out.append(Leaf(path, "discrete", (), int(s.n)))
        elif isinstance(s, gym.spaces.MultiBinary):
            out.append(Leaf(path, "binary", tuple(np.atleast_1d(s.n).tolist())))
        elif isinstance(s, gym.spaces.Dict):
            for k, sub in s.spaces.items():
                if not isinstance(k, str) or not k or "." in k:
                    raise SpaceError(f"{where}: Dict key {k!r} (keys must be non-empty "
                                     f"strings without '.')")
                walk(sub, (*path, k))
        elif isinstance(s, gym.spaces.Tuple):
            for i, sub in enumerate(s.spaces):
                walk(sub, (*path, str(i)))
        else:
            at = ".".join(("obs", *path))
            raise SpaceError(f"{where}: {type(s).__name__} at {at} is not supported "
                             f"(Box, Discrete, MultiBinary, Dict and Tuple are)")

    walk(space, ())
    if not out:
        raise SpaceError(f"{where}: holds no array")
    return tuple(out)


MASK_KEY = "action_mask"  # PettingZoo classic's name for the legal actions


def mask_column(leaves: tuple[Leaf, ...] | list[Leaf], act: ActionSpace) -> str:
    """The column of an `action_mask` entry of a Dict observation that masks the
    policy's logits (as wide as them: Discrete, MultiDiscrete), or ""."""
    for leaf in leaves:
        if leaf.path and leaf.path[-1] == MASK_KEY and act.kind in ("discrete", "multidiscrete") \
                and leaf.kind in ("box", "binary") and leaf.width == act.n:
            return leaf.column
    return ""


def plain(leaves: tuple[Leaf, ...]) -> bool:
    """One Box (or image) at `obs`: the observation is the array itself."""
    return len(leaves) == 1 and not leaves[0].path and leaves[0].kind in ("box", "image")


def split(raw: Any, leaves: tuple[Leaf, ...]) -> dict[str, np.ndarray]:
    """A (batched) observation as gymnasium gives it, nested dicts and tuples, as
    {column: array} in each leaf's dtype (one already split passes through)."""
    out = {}
    done = isinstance(raw, Mapping) and all(leaf.column in raw for leaf in leaves)
    for leaf in leaves:
        x = raw
        for p in (leaf.column,) if done else leaf.path:
            x = x[p] if isinstance(x, Mapping) else x[int(p)]
        out[leaf.column] = np.asarray(x).astype(leaf.dtype, copy=False)
    return out


def gather(m: Mapping[str, Any], leaves: tuple[Leaf, ...], prefix: str = "") -> Obs:
    """The observation held in a mapping's columns (`prefix`: "bootstrap_" for a
    fragment's bootstrap observation): the array when plain, else {column: array}."""
    if plain(leaves):
        return m[prefix + "obs"]
    return {leaf.column: m[prefix + leaf.column] for leaf in leaves}


def columns(leaves: tuple[Leaf, ...]) -> tuple[str, ...]:
    return tuple(leaf.column for leaf in leaves)


def features(obs: Any, leaves: tuple[Leaf, ...]) -> np.ndarray:
    """[B, sum of widths] float32: the non-image leaves flattened, discrete ones
    one-hot, in leaf order (what `policy.encoders.ObsEncoder` computes in torch)."""
    parts = []
    for leaf in leaves:
        x = np.asarray(obs[leaf.column])
        if leaf.kind == "image":
            continue
        if leaf.kind == "discrete":
            parts.append(np.eye(leaf.n, dtype=np.float32)[x.reshape(-1)])
        else:
            parts.append(x.reshape(len(x), -1).astype(np.float32, copy=False))
    return np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]


def contains_problem(obs: Mapping[str, np.ndarray], leaves: tuple[Leaf, ...]) -> str:
    """Values a shard can check per leaf kind: discrete indices in range, binary
    zeros and ones, finite floats. Empty when they hold."""
    for leaf in leaves:
        x = obs[leaf.column]
        if leaf.kind == "discrete" and x.size and (x.min() < 0 or x.max() >= leaf.n):
            return f"{leaf.column} holds indices outside 0..{leaf.n - 1}"
        if leaf.kind == "binary" and x.size and (x.min() < 0 or x.max() > 1):
            return f"{leaf.column} holds values other than 0 and 1"
        if leaf.kind == "box" and x.dtype.kind == "f" and not np.isfinite(x).all():
            return f"{leaf.column} is not finite"
    return ""


# --------------------------------------------------------------------------- actions

ACTION_KINDS = ("discrete", "box", "multidiscrete", "multibinary")


@dataclass(frozen=True)
class ActionSpace:
    """An action space: its kind, the number of policy outputs (`n`: logits, or the
    Gaussian's dimension), each action's shape, and per kind its sizes (`nvec`,
    MultiDiscrete) or bounds (Box)."""

    kind: str
    n: int
    shape: tuple[int, ...]
    nvec: tuple[int, ...] = ()
    low: tuple[float, ...] = ()
    high: tuple[float, ...] = ()


def action_space(space: gym.Space[Any], where: str = "action space") -> ActionSpace:
    if isinstance(space, gym.spaces.Discrete):
        if int(space.start) != 0:
            raise SpaceError(f"{where}: Discrete with start {space.start} (must be 0)")
        return ActionSpace("discrete", int(space.n), ())
    if isinstance(space, gym.spaces.Box) and len(space.shape) == 1:
        return ActionSpace("box", int(space.shape[0]), tuple(space.shape),
                           low=tuple(map(float, space.low)), high=tuple(map(float, space.high)))
    if isinstance(space, gym.spaces.MultiDiscrete) and space.nvec.ndim == 1:
        if np.any(space.start != 0):
            raise SpaceError(f"{where}: MultiDiscrete with a start other than 0")
        nvec = tuple(int(x) for x in space.nvec)
        return ActionSpace("multidiscrete", sum(nvec), (len(nvec),), nvec=nvec)
    if isinstance(space, gym.spaces.MultiBinary) and isinstance(space.n, int | np.integer):
        return ActionSpace("multibinary", int(space.n), (int(space.n),))
    raise SpaceError(f"{where}: {space} is not supported (Discrete, 1-d Box, 1-d "
                     f"MultiDiscrete and 1-d MultiBinary are)")
