"""A policy's returns on fresh episodes: what the evaluator, `verl eval`, SFT's
validation and the benchmark tools run. Torch-free: any `Actor` will do."""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np

from ..envs.make import make_env
from ..normalize import RunningMeanStd
from .actor import Actor


def video_available() -> bool:
    try:
        import moviepy  # noqa: F401  (gymnasium's RecordVideo writes with it)
    except ImportError:
        return False
    return True


def _eval_env(job: Any, video_dir: str, prefix: str) -> gym.Env[Any, Any]:
    """One evaluation env (`evaluation.env_kwargs` over the job's); the first one
    records video when asked and possible."""
    cfg = job.environment
    if job.evaluation.env_kwargs:
        cfg = dataclasses.replace(cfg, kwargs={**cfg.kwargs, **job.evaluation.env_kwargs})
    if not video_dir:
        return make_env(cfg, training=False)
    import gymnasium as gym

    env = make_env(cfg, render_mode="rgb_array", training=False)
    return gym.wrappers.RecordVideo(env, video_dir, episode_trigger=lambda _: True,
                                    name_prefix=prefix, disable_logger=True)


def evaluate(algo: Actor, job: Any, rms: RunningMeanStd | None, episodes: int, seed: int,
             deterministic: bool = True, video_dir: str = "", prefix: str = "eval"
             ) -> np.ndarray:
    """Run `episodes` episodes at once (one env each, seeds seed..seed+n-1); their returns.
    With `video_dir`, the first episode is recorded there."""
    import gymnasium as gym

    venv = gym.vector.SyncVectorEnv(
        [partial(_eval_env, job, video_dir if i == 0 else "", prefix) for i in range(episodes)])
    try:
        obs, _ = venv.reset(seed=[seed + i for i in range(episodes)])
        returns = np.zeros(episodes)
        active = np.ones(episodes, bool)
        clip = job.environment.clip_obs
        while active.any():
            o = rms.normalize(obs, clip) if rms is not None else obs.astype(np.float32)
            a, _ = algo.act(o, deterministic=deterministic)
            obs, r, te, tr, _ = venv.step(algo.env_action(a))
            returns += np.where(active, r, 0.0)
            active &= ~(te | tr)  # NEXT_STEP autoreset: later steps of a done env are ignored
        return returns
    finally:
        venv.close()
