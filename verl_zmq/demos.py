"""Demonstrations: recording them from a checkpoint, the file format, and the
behaviour-cloning term a learner adds to its policy loss.

The format is one `.npz` (read with allow_pickle=False), N steps in episode order:

    obs            [N, *obs_shape] float32   raw observations (before normalisation)
    action         [N] int64 (discrete) or [N, A] float32 (continuous, env units)
    reward         [N] float32
    terminated     [N] bool
    truncated      [N] bool
    episode_start  [M] int64   index of each episode's first step (0 first, increasing)
    format         [1] int64   1

Anyone can write it from their own data with `numpy.savez`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = 1
REQUIRED = ("obs", "action", "reward", "terminated", "truncated", "episode_start")


def record(lp: Any, episodes: int, seed: int, deterministic: bool = True
           ) -> dict[str, np.ndarray]:
    """Play `episodes` episodes of a loaded policy (see export.load_policy), one env."""
    from .envs.make import make_env

    env = make_env(lp.job.environment)
    cols: dict[str, list[Any]] = {k: [] for k in ("obs", "action", "reward", "terminated",
                                             "truncated")}
    starts = []
    clip = lp.job.environment.clip_obs
    try:
        for ep in range(episodes):
            obs, _ = env.reset(seed=seed + ep)
            starts.append(len(cols["obs"]))
            while True:
                o = obs[None].astype(np.float32)
                x = lp.rms.normalize(o, clip) if lp.rms is not None else o
                a, _ = lp.algo.act(x, deterministic=deterministic)
                act = lp.algo.env_action(a)[0]
                nxt, r, te, tr, _ = env.step(act)
                for k, v in (("obs", obs), ("action", act), ("reward", r), ("terminated", te),
                             ("truncated", tr)):
                    cols[k].append(v)
                obs = nxt
                if te or tr:
                    break
    finally:
        env.close()
    discrete = lp.spec.discrete
    return {"obs": np.asarray(cols["obs"], np.float32),
            "action": np.asarray(cols["action"], np.int64 if discrete else np.float32),
            "reward": np.asarray(cols["reward"], np.float32),
            "terminated": np.asarray(cols["terminated"], bool),
            "truncated": np.asarray(cols["truncated"], bool),
            "episode_start": np.asarray(starts, np.int64),
            "format": np.array([FORMAT], np.int64)}


@dataclass
class Demos:
    """Validated demonstration arrays."""

    obs: np.ndarray
    action: np.ndarray
    episodes: int

    def __len__(self) -> int:
        return len(self.obs)


def load_demos(path: str | Path, spec: Any) -> Demos:
    """Read and check a demonstrations file against an env; ValueError says what is wrong."""
    p = Path(path)
    if not p.exists():
        raise ValueError(f"{p}: no such file")
    try:
        with np.load(p, allow_pickle=False) as z:
            a = {k: z[k] for k in z.files}
    except Exception as e:  # zip, npy header, pickled object arrays: all refused
        raise ValueError(f"{p}: not a readable .npz of plain arrays ({type(e).__name__}: "
                         f"{str(e)[:120]})") from None
    missing = [k for k in REQUIRED if k not in a]
    if missing:
        raise ValueError(f"{p}: missing arrays {missing} (needs {', '.join(REQUIRED)})")
    n = len(a["obs"])
    if n == 0:
        raise ValueError(f"{p}: no steps")
    if tuple(a["obs"].shape[1:]) != tuple(spec.obs_shape):
        raise ValueError(f"{p}: obs has shape {a['obs'].shape}, the env needs "
                         f"[N, {', '.join(map(str, spec.obs_shape))}]")
    for k in ("action", "reward", "terminated", "truncated"):
        if len(a[k]) != n:
            raise ValueError(f"{p}: {k} has {len(a[k])} steps, obs has {n}")
    if a["obs"].dtype.kind != "f" or not np.isfinite(a["obs"]).all():
        raise ValueError(f"{p}: obs must be finite floats")
    act = a["action"]
    if spec.discrete:
        if act.ndim != 1 or act.dtype.kind not in "iu" or act.min() < 0 \
                or act.max() >= spec.n_actions:
            raise ValueError(f"{p}: action must be [N] integers in [0, {spec.n_actions})")
    elif act.shape[1:] != (spec.n_actions,) or act.dtype.kind != "f" \
            or not np.isfinite(act).all():
        raise ValueError(f"{p}: action must be [N, {spec.n_actions}] finite floats")
    starts = a["episode_start"]
    if starts.ndim != 1 or not len(starts) or starts[0] != 0 or (np.diff(starts) <= 0).any() \
            or starts[-1] >= n:
        raise ValueError(f"{p}: episode_start must be increasing step indices from 0")
    return Demos(a["obs"].astype(np.float32), act, len(starts))


class BCTerm:
    """The behaviour-cloning term: weight mixing_ratio (decaying linearly to 0 over
    decay_steps env steps when set) times -log pi(a_demo | s_demo) on a random batch."""

    def __init__(self, cfg: Any, spec: Any, seed: int = 0):
        self.cfg = cfg
        self.demos = load_demos(cfg.demos, spec)
        self.rng = np.random.default_rng(seed)

    def weight(self, env_steps: int) -> float:
        c = self.cfg
        if c.decay_steps > 0:
            return float(c.mixing_ratio * max(0.0, 1.0 - env_steps / c.decay_steps))
        return float(c.mixing_ratio)

    def batch(self) -> tuple[np.ndarray, np.ndarray]:
        """(raw obs, actions) of `batch_size` demonstration steps."""
        idx = self.rng.integers(0, len(self.demos), self.cfg.batch_size)
        return self.demos.obs[idx], self.demos.action[idx]
