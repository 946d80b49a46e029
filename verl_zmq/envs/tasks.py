"""Small tasks that exercise what Box-observation, Discrete-action envs do not:
memory, structured observations and multi-part actions. Registered as
gymnasium ids when `envs.make` is imported.

- `verl/CartPoleNoVel-v1`: CartPole with the velocities hidden (cart position
  and pole angle only); a policy must remember to balance it. Optimal 500.
- `verl/GoalGrid-v0`: a grid walk to a goal given in its own key, observations
  `{"position": Box(2), "goal": Box(2)}` (cells scaled to [0, 1]); with
  `goal_index=True` the goal is a `Discrete(size * size)` cell index instead.
  Reaching the goal pays shortest path / steps taken, so the optimal return is
  1.0 per episode.
- `verl/Waiting-v0`: an env that waits `latency_ms` per step without using the
  CPU (`time.sleep`, as an env waiting on a simulator, a robot or a socket
  would), with trivial dynamics: a random Box(4) observation, Discrete(2)
  actions, 1 for the action that matches the sign of the first feature,
  episodes of `length` steps (optimal return `length`). Its step can be begun
  (`begin_step`) and finished later, as a socket env's send and receive.
- `verl/JointChoice-v0`: each step shows a cue (one of 3 x 3, one-hot) and
  takes a MultiDiscrete([3, 3]) action; only both parts right pay 1. Episodes
  of `length` steps: the optimal return is `length`.
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv


class CartPoleNoVel(CartPoleEnv):
    """CartPole-v1 observing only the cart position and the pole angle."""

    def __init__(self, **kw: Any):
        super().__init__(**kw)
        high = np.array([self.x_threshold * 2, self.theta_threshold_radians * 2], np.float32)
        self.observation_space = gym.spaces.Box(-high, high, dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: Any = None):
        obs, info = super().reset(seed=seed, options=options)
        return obs[[0, 2]], info

    def step(self, action):
        obs, r, term, trunc, info = super().step(action)
        return obs[[0, 2]], r, term, trunc, info


_MOVES = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]])


class GoalGrid(gym.Env):
    """Walk a `size` x `size` grid to the goal; the goal is its own Dict key."""

    def __init__(self, size: int = 5, max_steps: int = 0, goal_index: bool = False):
        self.size = size
        self.max_steps = max_steps or 4 * size
        self.goal_index = goal_index
        self.observation_space = gym.spaces.Dict({
            "position": gym.spaces.Box(0.0, 1.0, (2,), np.float32),
            "goal": gym.spaces.Discrete(size * size) if goal_index
            else gym.spaces.Box(0.0, 1.0, (2,), np.float32)})
        self.action_space = gym.spaces.Discrete(4)
        self.pos = np.zeros(2, np.int64)
        self.goal = np.zeros(2, np.int64)
        self.t = self.shortest = 0

    def _obs(self) -> dict[str, Any]:
        goal = int(self.goal[0] * self.size + self.goal[1]) if self.goal_index \
            else (self.goal / (self.size - 1)).astype(np.float32)
        return {"position": (self.pos / (self.size - 1)).astype(np.float32), "goal": goal}

    def reset(self, *, seed: int | None = None, options: Any = None):
        super().reset(seed=seed)
        cells = self.np_random.choice(self.size * self.size, 2, replace=False)
        self.pos = np.array(divmod(int(cells[0]), self.size))
        self.goal = np.array(divmod(int(cells[1]), self.size))
        self.t = 0
        self.shortest = int(np.abs(self.pos - self.goal).sum())
        return self._obs(), {}

    def step(self, action):
        self.pos = np.clip(self.pos + _MOVES[int(action)], 0, self.size - 1)
        self.t += 1
        if (self.pos == self.goal).all():
            return self._obs(), self.shortest / self.t, True, False, {}
        return self._obs(), 0.0, False, self.t >= self.max_steps, {}


class JointChoice(gym.Env):
    """Match a cue with both parts of a MultiDiscrete([3, 3]) action at once."""

    def __init__(self, length: int = 8):
        self.length = length
        self.observation_space = gym.spaces.Box(0.0, 1.0, (9,), np.float32)
        self.action_space = gym.spaces.MultiDiscrete([3, 3])
        self.cue = self.t = 0

    def _obs(self) -> np.ndarray:
        return np.eye(9, dtype=np.float32)[self.cue]

    def reset(self, *, seed: int | None = None, options: Any = None):
        super().reset(seed=seed)
        self.t = 0
        self.cue = int(self.np_random.integers(9))
        return self._obs(), {}

    def step(self, action):
        a = np.asarray(action).reshape(-1)
        r = float(int(a[0]) * 3 + int(a[1]) == self.cue)
        self.t += 1
        self.cue = int(self.np_random.integers(9))
        return self._obs(), r, self.t >= self.length, False, {}


class Waiting(gym.Env):
    """Steps that wait `latency_ms` without the CPU, trivial dynamics (see the module)."""

    def __init__(self, latency_ms: float = 5.0, length: int = 200):
        self.latency_s = latency_ms / 1000.0
        self.length = length
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0
        self.obs = np.zeros(4, np.float32)
        self.due: float | None = None

    def begin_step(self, action: Any) -> None:
        """The wait starts now (as an action sent on a socket); `step` waits out the rest."""
        self.due = time.monotonic() + self.latency_s

    def _draw(self) -> np.ndarray:
        self.obs = self.np_random.uniform(-1, 1, 4).astype(np.float32)
        return self.obs

    def reset(self, *, seed: int | None = None, options: Any = None):
        super().reset(seed=seed)
        self.t, self.due = 0, None
        return self._draw(), {}

    def step(self, action):
        due, self.due = self.due, None
        wait = self.latency_s if due is None else due - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        r = float(int(action) == int(self.obs[0] > 0))
        self.t += 1
        return self._draw(), r, False, self.t >= self.length, {}


def register() -> None:
    for env_id, entry, kw in (
            ("verl/CartPoleNoVel-v1", CartPoleNoVel, {"max_episode_steps": 500}),
            ("verl/GoalGrid-v0", GoalGrid, {}),
            ("verl/JointChoice-v0", JointChoice, {}),
            ("verl/Waiting-v0", Waiting, {})):
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=entry, **kw)


register()
