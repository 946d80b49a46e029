"""Small envs for tests: an unsupported space, and a controllable one."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class TextObsEnv(gym.Env):
    """Observations in a Text space: not supported, refused at check."""

    observation_space = gym.spaces.Dict({"x": gym.spaces.Text(8)})
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return {"x": "a"}, {}

    def step(self, action):
        return {"x": "a"}, 0.0, True, False, {}


class NestedObsEnv(gym.Env):
    """Every observation kind at once, nested: an image, a Box, and a Tuple of a
    Discrete and a MultiBinary; MultiBinary(3) actions (or `action="discrete"`).
    Episodes of `length` steps; the reward counts the action's bits equal to the
    MultiBinary observation's."""

    def __init__(self, length: int = 5, action: str = "multibinary"):
        self.length = length
        self.observation_space = gym.spaces.Dict({
            "image": gym.spaces.Box(0, 255, (6, 6, 2), np.uint8),
            "x": gym.spaces.Box(-2.0, 2.0, (2,), np.float32),
            "pair": gym.spaces.Tuple((gym.spaces.Discrete(5), gym.spaces.MultiBinary(3)))})
        self.action_space = gym.spaces.MultiBinary(3) if action == "multibinary" \
            else gym.spaces.Discrete(3)
        self.t = 0

    def _obs(self):
        self.last = self.observation_space.sample()
        return self.last

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.observation_space.seed(int(self.np_random.integers(1 << 30)))
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        bits = self.last["pair"][1]
        r = float((np.asarray(action).reshape(-1)[:3] == bits[:np.size(action)]).sum())
        self.t += 1
        return self._obs(), r, self.t >= self.length, False, {}


def double_reward(obs, action, reward, next_obs) -> float:
    """A custom reward function (`environment.reward_fn = "tests.envs:double_reward"`)."""
    return 2.0 * reward


class FaultyCartPole(gym.Env):
    """CartPole whose `step` hangs or raises now and then (injectable faults, like
    Tianshou's latency env): every `hang_every`-th step sleeps `hang_s` seconds,
    every `raise_every`-th step raises; 0 turns a fault off. The time limit is 500."""

    def __init__(self, hang_every: int = 0, raise_every: int = 0, hang_s: float = 3600.0):
        from gymnasium.envs.classic_control import CartPoleEnv

        self.inner = CartPoleEnv()
        self.observation_space = self.inner.observation_space
        self.action_space = self.inner.action_space
        self.hang_every, self.raise_every, self.hang_s = hang_every, raise_every, hang_s
        self.steps = self.t = 0

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return self.inner.reset(seed=seed, options=options)

    def step(self, action):
        import time

        self.steps += 1
        self.t += 1
        if self.hang_every and self.steps % self.hang_every == 0:
            time.sleep(self.hang_s)
        if self.raise_every and self.steps % self.raise_every == 0:
            raise RuntimeError(f"injected fault at step {self.steps}")
        obs, r, te, tr, info = self.inner.step(action)
        return obs, r, te, tr or self.t >= 500, info


class Corridor(gym.Env):
    """A walk along a corridor of `length` cells from its start: right earns 1, the
    far end terminates. Registered by this module as `VerlTests/Corridor-v0`, so a
    job can name it gymnasium's way: `tests.envs:VerlTests/Corridor-v0`."""

    def __init__(self, length: int = 60):
        self.length = length
        self.observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.x = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        right = int(action) == 1
        self.x = max(0, self.x + (1 if right else -1))
        obs = np.array([self.x / self.length], np.float32)
        return obs, float(right), self.x >= self.length, False, {}


if "VerlTests/Corridor-v0" not in gym.registry:
    gym.register(id="VerlTests/Corridor-v0", entry_point=Corridor)


class Counting(gym.Env):
    """Two-float observations, two actions, episodes of `length` steps; reward 1 for
    action 1; `info["is_success"]` at every step. The broken envs below break one
    rule of gymnasium's API each."""

    def __init__(self, length: int = 10, explode: bool = False):
        if explode:
            raise RuntimeError("this env refuses explode=True")
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.length, self.t = length, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        obs = np.full(2, self.t / self.length, np.float32)
        return obs, float(action == 1), self.t >= self.length, False, {
            "is_success": float(action == 1)}


class WrongShape(Counting):
    def step(self, action):
        _, r, te, tr, info = super().step(action)
        return np.zeros(3, np.float32), r, te, tr, info


class MissingKey(Counting):
    def __init__(self):
        super().__init__()
        box = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.observation_space = gym.spaces.Dict({"pos": box, "vel": box})

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return {"pos": np.zeros(1, np.float32), "vel": np.zeros(1, np.float32)}, {}

    def step(self, action):
        _, r, te, tr, info = super().step(action)
        return {"pos": np.zeros(1, np.float32)}, r, te, tr, info


class FourTuple(Counting):
    def step(self, action):
        obs, r, te, _, info = super().step(action)
        return obs, r, te, info


class Flaky(Counting):
    """Raises on 1% of its steps."""

    def step(self, action):
        if self.np_random.random() < 0.01:
            raise RuntimeError("flaky env: the simulator crashed")
        return super().step(action)


class RewardScaleAfter(gym.Wrapper):
    """Rewards multiplied by `factor` once this env has taken `after` steps: a job
    whose returns change scale mid-run (health warnings: the critic, gradients)."""

    def __init__(self, env, after: int = 500, factor: float = 1000.0):
        super().__init__(env)
        self.after, self.factor, self.steps = after, factor, 0

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        if self.steps > self.after:
            reward = float(reward) * self.factor
        return obs, reward, terminated, truncated, info


def zero_reward(prompt, response, meta) -> float:
    """A reward that scores every response 0 (`environment.kwargs.reward =
    "tests.envs:zero_reward"`): no group ever carries a learning signal."""
    return 0.0
