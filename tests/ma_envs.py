"""Small multi-agent and masked envs the multi-agent tests run (importable as
`tests.ma_envs:...` by the roles they start)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class MaskedChoice(gym.Env):
    """Each step a random non-empty set of `n` actions is legal (`action_mask` in a
    Dict observation); an illegal action raises, so a test passes only if none is
    ever taken. Reward 1 for the legal action with the largest index, else 0."""

    def __init__(self, n: int = 6, length: int = 20):
        self.n, self.length = n, length
        self.observation_space = gym.spaces.Dict({
            "action_mask": gym.spaces.Box(0, 1, (n,), np.int8),
            "obs": gym.spaces.Box(-1.0, 1.0, (n,), np.float32)})
        self.action_space = gym.spaces.Discrete(n)
        self.mask = np.ones(n, np.int8)

    def _obs(self) -> dict[str, np.ndarray]:
        self.mask = (self.np_random.random(self.n) < 0.4).astype(np.int8)
        self.mask[self.np_random.integers(self.n)] = 1
        return {"action_mask": self.mask.copy(),
                "obs": (self.mask * 2.0 - 1.0).astype(np.float32)}

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any) -> Any:
        a = int(action)
        if not self.mask[a]:
            raise RuntimeError(f"illegal action {a} under mask {self.mask.tolist()}")
        r = float(a == int(np.flatnonzero(self.mask).max()))
        self.t += 1
        return self._obs(), r, False, self.t >= self.length, {}


class Leaving:
    """A PettingZoo ParallelEnv: three agents, one of which (`runner`) leaves after
    three steps and one (`late`) that joins at step two; Discrete(3) actions,
    different observation widths for `runner`. Each agent is rewarded 1 for action
    equal to its index mod 3. Episodes last 6 steps."""

    metadata = {"name": "leaving_v0"}

    def __init__(self) -> None:
        self.possible_agents = ["a_0", "a_1", "runner", "late"]
        self.agents: list[str] = []
        self.t = 0

    def observation_space(self, agent: str) -> gym.spaces.Space[Any]:
        return gym.spaces.Box(-1.0, 1.0, (2 if agent == "runner" else 3,), np.float32)

    def action_space(self, agent: str) -> gym.spaces.Space[Any]:
        return gym.spaces.Discrete(3)

    def _obs(self, a: str) -> np.ndarray:
        return np.full(self.observation_space(a).shape, self.t / 6.0, np.float32)

    def reset(self, seed: int | None = None, options: Any = None) -> Any:
        self.t = 0
        self.agents = ["a_0", "a_1", "runner"]
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> Any:
        assert set(actions) == set(self.agents), (actions, self.agents)
        self.t += 1
        rew = {a: float(int(actions[a]) == self.possible_agents.index(a) % 3)
               for a in self.agents}
        term = {a: a == "runner" and self.t >= 3 for a in self.agents}
        trunc = {a: self.t >= 6 for a in self.agents}
        obs = {a: self._obs(a) for a in self.agents}
        infos: dict[str, dict[str, Any]] = {a: {} for a in self.agents}
        self.agents = [a for a in self.agents if not (term[a] or trunc[a])]
        if self.t == 2:
            self.agents.append("late")
            obs["late"] = self._obs("late")
        return obs, rew, term, trunc, infos

    def state(self) -> np.ndarray:
        return np.array([self.t / 6.0, len(self.agents)], np.float32)

    def close(self) -> None:
        pass


def leaving() -> Leaving:
    return Leaving()
