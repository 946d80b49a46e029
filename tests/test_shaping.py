"""The shaping wrappers a job can name: action smoothing averages the applied
actions and restarts each episode, the observation bonus and the energy penalty
change the reward by exactly their terms, and each refuses a space it cannot
serve, naming it; a job naming them passes verl check."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from tests.conftest import CONFIGS, verl_here
from verl_zmq.envs.shaping import ActionSmoothing, EnergyPenalty, ObsBonus


class _Echo(gym.Env):
    """Observation: the last action applied; reward 1 a step."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.asarray(action, np.float32), 1.0, False, False, {}


def test_action_smoothing_averages_and_restarts_each_episode():
    env = ActionSmoothing(_Echo(), alpha=0.5)
    env.reset()
    obs, *_ = env.step(np.array([1.0, -1.0]))
    np.testing.assert_allclose(obs, [1.0, -1.0])  # the first action as it is
    obs, *_ = env.step(np.array([0.0, 0.0]))
    np.testing.assert_allclose(obs, [0.5, -0.5])
    env.reset()
    obs, *_ = env.step(np.array([0.2, 0.2]))
    np.testing.assert_allclose(obs, [0.2, 0.2])


def test_bonus_and_penalty_add_exactly_their_terms():
    env = EnergyPenalty(ObsBonus(_Echo(), index=0, weight=2.0), weight=0.1)
    env.reset()
    _, r, *_ = env.step(np.array([0.5, -1.0]))
    assert r == pytest.approx(1.0 + 2.0 * 0.5 - 0.1 * (0.25 + 1.0))


def test_spaces_they_cannot_serve_are_refused():
    with pytest.raises(ValueError, match="Box action space"):
        ActionSmoothing(gym.make("CartPole-v1"))
    with pytest.raises(ValueError, match="index 7"):
        ObsBonus(gym.make("CartPole-v1"), index=7)
    with pytest.raises(ValueError, match="alpha"):
        ActionSmoothing(_Echo(), alpha=1.0)


def test_a_job_naming_them_passes_the_check():
    wrappers = ('[{wrapper = "verl_zmq.envs.shaping:ActionSmoothing", kwargs = {alpha = 0.3}}, '
                '{wrapper = "verl_zmq.envs.shaping:EnergyPenalty", kwargs = {weight = 0.01}}]')
    r = verl_here("check", str(CONFIGS / "pendulum_sac.toml"), "--set",
                  f"environment.wrappers={wrappers}")
    assert r.returncode == 0, r.stderr
