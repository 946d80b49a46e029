"""Envs that wait (a simulator, a robot, a socket): `verl/Waiting-v0` waits without
the CPU, and `environment.vectorization = "threads"` steps a vector step's envs at
once in threads (or, for envs whose step can be begun, begins them all and then
finishes each), with the same results as gymnasium's sync vector env."""

from __future__ import annotations

import threading

import gymnasium as gym
import numpy as np
import pytest

from tests.conftest import CONFIGS
from verl_zmq.config import load_job
from verl_zmq.envs.make import make_vector_env
from verl_zmq.envs.threads import ThreadVectorEnv


def _job(env_id: str, vec: str, kwargs: str = "{}"):
    return load_job(CONFIGS / "cartpole_ppo.toml", [f"environment.id={env_id}",
                                                    f"environment.kwargs={kwargs}",
                                                    f"environment.vectorization={vec}"])


def _rollout(env_id: str, vec: str, kwargs: str, steps: int = 300):
    venv, seeds = make_vector_env(_job(env_id, vec, kwargs).environment, 5, 7, 1)
    assert isinstance(venv, ThreadVectorEnv) == (vec == "threads")
    rng = np.random.default_rng(0)
    out = [venv.reset(seed=seeds)[0]]
    for _ in range(steps):
        obs, r, te, tr, _ = venv.step(rng.integers(0, 2, 5))
        out += [obs, r, te, tr]
    venv.close()
    return out


@pytest.mark.parametrize("env_id,kwargs", [("verl/Waiting-v0", "{latency_ms=0, length=17}"),
                                           ("CartPole-v1", "{}")])
def test_threads_step_as_the_sync_vector_env_does(env_id, kwargs):
    a, b = _rollout(env_id, "sync", kwargs), _rollout(env_id, "threads", kwargs)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    ends = sum(int((te | tr).sum()) for te, tr in zip(b[3::4], b[4::4], strict=True))
    assert ends >= 5 * 4  # episodes ended and the envs were autoreset


class _Together(gym.Env):
    """Its step returns only once all four envs of the vector step are inside theirs
    (a barrier): stepped one after another, the first would wait in vain."""

    barrier = threading.Barrier(4, timeout=60)

    def __init__(self):
        self.observation_space = gym.spaces.Box(-1, 1, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        return np.zeros(1, np.float32), {}

    def step(self, action):
        _Together.barrier.wait()
        return np.ones(1, np.float32), 1.0, False, False, {}


def test_a_vector_step_has_its_envs_wait_together():
    venv = ThreadVectorEnv([_Together for _ in range(4)])
    venv.reset(seed=0)
    for _ in range(3):
        obs, r, *_ = venv.step(np.zeros(4, int))
    assert r.tolist() == [1.0] * 4 and not _Together.barrier.broken
    venv.close()


def test_the_waiting_env_pays_the_matching_action():
    env = gym.make("verl/Waiting-v0", latency_ms=0, length=3)
    obs, _ = env.reset(seed=1)
    total = 0.0
    for _ in range(3):
        obs, r, te, tr, _ = env.step(int(obs[0] > 0))
        total += r
    assert total == 3.0 and tr and not te


class _Begun(gym.Env):
    """A step that can be begun: finishing one checks that every env of the vector
    step was begun first, with the vector's own action, in the vector's thread."""

    begun: list[int] = []

    def __init__(self):
        self.observation_space = gym.spaces.Box(-1, 1, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(3)
        self.sent: int | None = None

    def begin_step(self, action):
        self.sent = int(action)
        _Begun.begun.append(int(action))

    def reset(self, *, seed=None, options=None):
        return np.zeros(1, np.float32), {}

    def step(self, action):
        ok = (self.sent == int(action) and len(_Begun.begun) % 4 == 0
              and threading.current_thread() is threading.main_thread())
        return np.ones(1, np.float32), float(ok), False, False, {}


def test_envs_whose_step_can_be_begun_are_begun_together_without_threads():
    _Begun.begun.clear()
    venv = ThreadVectorEnv([_Begun for _ in range(4)])
    assert venv.begins is not None
    venv.reset(seed=0)
    for t in range(3):
        _, r, *_ = venv.step(np.array([0, 1, 2, t % 3]))
        assert r.tolist() == [1.0] * 4
    assert _Begun.begun[-4:] == [0, 1, 2, 2]
    venv.close()
    # an action wrapper changes what reaches the env: stepped in threads instead
    wrapped = ThreadVectorEnv([lambda: gym.wrappers.TransformAction(
        _Begun(), lambda a: (a + 1) % 3, gym.spaces.Discrete(3)) for _ in range(4)])
    assert wrapped.begins is None
    wrapped.close()
