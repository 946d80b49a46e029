"""A policy's returns on fresh episodes: what the evaluator, `verl eval`, SFT's
validation and the benchmark tools run. Torch-free: any `Actor` will do."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np

from ..envs.infos import at_episode_ends
from ..envs.make import make_env
from ..envs.spaces import split
from ..normalize import ObsNorm
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


def policy_input(raw: Any, spec: Any, rms: ObsNorm | None, clip: float) -> Any:
    """What a policy acts on from raw (batched) observations as the env gives them:
    a structured one as {column: array}, normalised with `rms` when given."""
    obs: Any = split(raw, spec.leaves) if spec.structured else raw
    if rms is not None:
        return rms.normalize(obs, clip)
    return obs if spec.structured else np.asarray(obs, np.float32)


class Memory:
    """A recurrent policy's state across calls for a batch of envs (none for others):
    `act` passes it and keeps the next one; envs whose episode starts are marked
    with `start`."""

    def __init__(self, actor: Any, n: int):
        self.actor = actor
        self.size = int(getattr(actor, "state_size", 0))
        self.state = np.zeros((n, self.size), np.float32)
        self.first = np.ones(n, bool)

    def act(self, obs: Any, deterministic: bool) -> np.ndarray:
        if not self.size:
            a, _ = self.actor.act(obs, deterministic=deterministic)
            return a  # type: ignore[no-any-return]
        a, ex = self.actor.act(obs, deterministic=deterministic, state=(self.state, self.first))
        self.state, self.first = ex["rnn_state"], np.zeros_like(self.first)
        return a  # type: ignore[no-any-return]

    def start(self, which: np.ndarray) -> None:
        self.first |= which


def evaluate(algo: Actor, job: Any, rms: ObsNorm | None, episodes: int, seed: int,
             deterministic: bool = True, video_dir: str = "", prefix: str = "eval",
             infos: dict[str, list[float]] | None = None,
             progress: Callable[[int, int], None] | None = None) -> np.ndarray:
    """Run `episodes` episodes at once (one env each, seeds seed..seed+n-1); their returns.
    With `video_dir`, the first episode is recorded there; `infos` receives each
    episode's `logging.info_keys` values where it ends; `progress(done, episodes)`
    is called as episodes end. A policy that answers prompt files
    (`seq/hf_grpo.py`) is scored on its val file instead: each val prompt's score."""
    validate = getattr(algo, "validate", None)
    if validate is not None:
        scores: np.ndarray = validate()
        return scores
    import gymnasium as gym

    venv = gym.vector.SyncVectorEnv(
        [partial(_eval_env, job, video_dir if i == 0 else "", prefix) for i in range(episodes)])
    try:
        obs, _ = venv.reset(seed=[seed + i for i in range(episodes)])
        returns = np.zeros(episodes)
        active = np.ones(episodes, bool)
        clip = job.environment.clip_obs
        memory = Memory(algo, episodes)
        spec = algo.spec
        keys = job.logging.info_keys if infos is not None else ()
        infos = infos if infos is not None else {}
        while active.any():
            a = memory.act(policy_input(obs, spec, rms, clip), deterministic)
            obs, r, te, tr, info = venv.step(algo.env_action(a))
            returns += np.where(active, r, 0.0)
            ended = active & (te | tr)
            if ended.any():
                at_episode_ends(info, np.flatnonzero(ended), keys, infos)
            active &= ~(te | tr)  # NEXT_STEP autoreset: later steps of a done env are ignored
            if progress is not None and ended.any():
                progress(int(episodes - active.sum()), episodes)
        return returns
    finally:
        venv.close()
