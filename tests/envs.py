"""Small envs for tests: an unsupported space, and a controllable one."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class DictObsEnv(gym.Env):
    """Observations in a Dict space: not supported, refused at check."""

    observation_space = gym.spaces.Dict({"x": gym.spaces.Box(-1, 1, (2,))})
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return {"x": np.zeros(2, np.float32)}, {}

    def step(self, action):
        return {"x": np.zeros(2, np.float32)}, 0.0, True, False, {}


def double_reward(obs, action, reward, next_obs) -> float:
    """A custom reward function (`environment.reward_fn = "tests.envs:double_reward"`)."""
    return 2.0 * reward
