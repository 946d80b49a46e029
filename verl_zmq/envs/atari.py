"""Image preprocessing applied the same way in samplers and the evaluator.

`[environment] preset = "atari"`: the standard Atari pipeline through ale-py and
gymnasium's `AtariPreprocessing` (Mnih et al. 2015; Machado et al. 2018): up to
30 no-op actions at reset, frame skip 4 with the last two frames max-pooled,
84x84 grayscale, FIRE at the start of each life in games that serve on it, and
a stack of the last 4 frames. For training only, a lost
life ends the episode and rewards are clipped to their sign; evaluation plays
whole games and reports the unclipped score.

`[environment] frame_stack = N` stacks the last N frames of any image env on
the channel axis (channels last, as the encoders read them). Frames stay uint8.
Stacks are built in the sampler and travel whole: a fragment of 84x84x4 frames
goes through the wire's zero-copy path, and rebuilding stacks at the learner
would need each env's frame history across fragment boundaries."""

from __future__ import annotations

from collections import deque

import gymnasium as gym
import numpy as np

ATARI_STACK = 4


def register_ale() -> None:
    """Register ale-py's `ALE/...` ids with gymnasium (raises ImportError without it)."""
    import ale_py

    gym.register_envs(ale_py)


class StackFrames(gym.ObservationWrapper):
    """The last `n` observations stacked on a new last axis (or along the channel
    axis of (H, W, C) images): [H, W] frames become [H, W, n], [H, W, C] become
    [H, W, C * n]. At reset the first frame fills the stack."""

    def __init__(self, env: gym.Env, n: int):
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) not in (2, 3):
            raise ValueError(f"environment.frame_stack needs image observations (H, W) or "
                             f"(H, W, C); this env's are {space}")
        self.n = n
        self.frames: deque[np.ndarray] = deque(maxlen=n)
        self.flat = len(space.shape) == 3
        low = self._stack([space.low] * n)
        high = self._stack([space.high] * n)
        self.observation_space = gym.spaces.Box(low, high, dtype=space.dtype)

    def _stack(self, frames) -> np.ndarray:
        return np.concatenate(frames, -1) if self.flat else np.stack(frames, -1)

    def reset(self, **kw):
        obs, info = self.env.reset(**kw)
        self.frames.clear()
        self.frames.extend([obs] * self.n)
        return self._stack(self.frames), info

    def observation(self, obs):
        self.frames.append(obs)
        return self._stack(self.frames)


class FireAtLifeStart(gym.Wrapper):
    """Presses FIRE when a game or a new life starts, in games that need it to go on
    (Breakout serves only on FIRE): a deterministic policy that never learned to
    press it would otherwise play an evaluation until the frame limit."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.lives = 0

    def _lives(self) -> int:
        return int(self.env.unwrapped.ale.lives())

    def reset(self, **kw):
        obs, info = self.env.reset(**kw)
        obs, _, term, trunc, info = self.env.step(1)
        if term or trunc:
            obs, info = self.env.reset(**kw)
        self.lives = self._lives()
        return obs, info

    def step(self, action):
        obs, r, term, trunc, info = self.env.step(action)
        lives = self._lives()
        if 0 < lives < self.lives and not (term or trunc):
            obs, r2, term, trunc, info = self.env.step(1)
            r += r2
        self.lives = lives
        return obs, r, term, trunc, info


def _needs_fire(env: gym.Env) -> bool:
    meanings = getattr(env.unwrapped, "get_action_meanings", lambda: [])()
    return len(meanings) > 1 and meanings[1] == "FIRE"


def atari(env: gym.Env, training: bool) -> gym.Env:
    """AtariPreprocessing on an env made with `frameskip=1`, FIRE pressed at each
    new life where the game needs it, rewards clipped to their sign when `training`."""
    env = gym.wrappers.AtariPreprocessing(
        env, noop_max=30, frame_skip=4, screen_size=84, terminal_on_life_loss=training,
        grayscale_obs=True, scale_obs=False)
    if _needs_fire(env):
        env = FireAtLifeStart(env)
    if training:
        env = gym.wrappers.TransformReward(env, lambda r: float(np.sign(r)))
    return env
