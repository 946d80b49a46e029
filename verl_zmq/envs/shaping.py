"""Reward shaping and action smoothing as gymnasium wrappers any job can name in
`environment.wrappers`, for locomotion tasks such as BipedalWalker-v3:

    wrappers = [
      {wrapper = "verl_zmq.envs.shaping:ActionSmoothing", kwargs = {alpha = 0.3}},
      {wrapper = "verl_zmq.envs.shaping:ObsBonus", kwargs = {index = 2, weight = 0.5}},
      {wrapper = "verl_zmq.envs.shaping:EnergyPenalty", kwargs = {weight = 0.01}},
    ]

(BipedalWalker's observation 2 is the hull's horizontal velocity: a
forward-velocity bonus.) The evaluator builds its envs with the same wrappers
as the samplers, so the returns it reports include the shaping; ActionSmoothing
alone leaves rewards as the env pays them.
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np


def _box(env: gym.Env, what: str) -> gym.spaces.Box:
    space = env.action_space
    if not isinstance(space, gym.spaces.Box):
        raise ValueError(f"{what} needs a Box action space, got {space}")
    return space


class ActionSmoothing(gym.ActionWrapper):
    """The action applied is an exponential average of the policy's:
    a_t = alpha * a_{t-1} + (1 - alpha) * policy_t, reset to the policy's own
    first action each episode. Damps the jitter of Gaussian exploration."""

    def __init__(self, env: gym.Env, alpha: float = 0.3):
        if not 0.0 <= alpha < 1.0:
            raise ValueError(f"alpha must be in [0, 1), got {alpha}")
        super().__init__(env)
        self.space = _box(env, "ActionSmoothing")
        self.alpha = float(alpha)
        self.prev: np.ndarray | None = None

    def reset(self, **kw: Any) -> tuple[Any, dict[str, Any]]:
        self.prev = None
        return self.env.reset(**kw)

    def action(self, action: Any) -> np.ndarray:
        a = np.clip(np.asarray(action, np.float32), self.space.low, self.space.high)
        self.prev = a if self.prev is None else self.alpha * self.prev + (1 - self.alpha) * a
        return self.prev.astype(self.space.dtype)


class ObsBonus(gym.Wrapper):
    """reward += weight * obs[index] after each step: a bonus on one observed
    quantity (BipedalWalker: index 2, forward velocity)."""

    def __init__(self, env: gym.Env, index: int, weight: float = 1.0):
        super().__init__(env)
        shape = env.observation_space.shape
        if not isinstance(env.observation_space, gym.spaces.Box) or not shape \
                or not -shape[0] <= index < shape[0] or len(shape) != 1:
            raise ValueError(f"ObsBonus: index {index} is not an entry of the flat Box "
                             f"observation space {env.observation_space}")
        self.index, self.weight = int(index), float(weight)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, r, term, trunc, info = self.env.step(action)
        return obs, float(r) + self.weight * float(obs[self.index]), term, trunc, info


class EnergyPenalty(gym.Wrapper):
    """reward -= weight * sum(action ** 2) after each step: the energy spent."""

    def __init__(self, env: gym.Env, weight: float = 0.01):
        super().__init__(env)
        _box(env, "EnergyPenalty")
        self.weight = float(weight)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, r, term, trunc, info = self.env.step(action)
        energy = float(np.square(np.asarray(action, np.float64)).sum())
        return obs, float(r) - self.weight * energy, term, trunc, info
