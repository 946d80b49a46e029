"""`training.stop_at_episode_return`: training ends once a full window of the
last 100 training episodes has a mean at the target, never on fewer episodes;
data-parallel ranks (each seeing its own episodes) are refused it."""

from __future__ import annotations

import pytest
import structlog

from tests.conftest import CONFIGS
from verl_zmq.config import ConfigError, load_job
from verl_zmq.envs.make import env_spec
from verl_zmq.learning.trainer import Trainer


def test_the_target_needs_a_full_window_at_or_above_it(tmp_path):
    job = load_job(CONFIGS / "cartpole_ppo.toml",
                   ["training.stop_at_episode_return=475"])
    t = Trainer(job, env_spec(job.environment), tmp_path, structlog.get_logger())
    t.returns.extend([500.0] * 99)
    assert not t._episode_target_reached()  # 99 episodes: not a window yet
    t.returns.append(500.0)
    assert t._episode_target_reached()
    t.returns.extend([400.0] * 20)  # the oldest leave the window: mean 484
    assert t._episode_target_reached()
    t.returns.extend([400.0] * 20)  # mean 468
    assert not t._episode_target_reached()


def test_without_the_setting_training_runs_its_budget(tmp_path):
    job = load_job(CONFIGS / "cartpole_ppo.toml")
    t = Trainer(job, env_spec(job.environment), tmp_path, structlog.get_logger())
    t.returns.extend([500.0] * 100)
    assert not t._episode_target_reached()


def test_data_parallel_learners_are_refused_it():
    with pytest.raises(ConfigError, match="training.stop_at_episode_return"):
        load_job(CONFIGS / "cartpole_ppo.toml", ["training.stop_at_episode_return=475",
                                                 "training.num_learners=2"])
