"""Image observations: Catch's dynamics, uint8 kept from the env through the
sampler's fragment and the wire to the learner's batch, the convolutional
encoders' shapes, and a PPO update on images."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.conftest import CONFIGS
from verl_zmq import wire
from verl_zmq.batch import job_layout
from verl_zmq.config import load_job
from verl_zmq.envs import env_spec, make_vector_env
from verl_zmq.pixels.catch import CatchEnv
from verl_zmq.pixels.cnn import encoder
from verl_zmq.roles.sampler import Collector

JOB = CONFIGS / "catch_ppo.toml"


def test_catch_ends_after_the_ball_falls_with_plus_or_minus_one():
    env = CatchEnv(rows=10, cols=5, scale=2)
    obs, _ = env.reset(seed=3)
    assert obs.shape == (20, 10, 1) and obs.dtype == np.uint8
    assert set(np.unique(obs)) == {0, 255}
    ball_col = int(np.argmax(obs[0, :, 0])) // 2
    steps, done, r = 0, False, 0.0
    while not done:
        paddle = int(np.argmax(obs[-1, :, 0])) // 2
        action = 1 + int(np.sign(ball_col - paddle))  # follow the ball
        obs, r, done, trunc, _ = env.step(action)
        steps += 1
    assert steps == 9 and r == 1.0
    env.reset(seed=3)
    for _ in range(9):  # always left: misses a ball that is not in the first column
        _, r, done, _, _ = env.step(0)
    assert done and r == (1.0 if ball_col == 0 else -1.0)


def _collector(job):
    from verl_zmq.algos import make_algorithm

    spec = env_spec(job.environment)
    torch.manual_seed(0)
    algo = make_algorithm(job, spec)
    venv, seeds = make_vector_env(job.environment, job.sampling.num_envs_per_worker, 0)
    return Collector(job, algo, venv, seeds), algo, spec


def test_images_stay_uint8_from_the_env_to_the_learners_batch():
    job = load_job(JOB, ["sampling.num_envs_per_worker=4"])
    col, algo, spec = _collector(job)
    frag, version = col.collect()
    assert frag["obs"].dtype == np.uint8 and frag["bootstrap_obs"].dtype == np.uint8
    layout = job_layout(job, spec)
    assert layout.problem(frag) == ""
    back = wire.decode([bytes(f) for f in wire.encode(wire.Fragment(version=version,
                                                                    arrays=frag))])
    assert back.arrays["obs"].dtype == np.uint8
    assert np.array_equal(back.arrays["obs"], frag["obs"])
    batch = layout.concat([dict(back.arrays.items()), frag])
    assert batch["obs"].dtype == np.uint8
    out = algo.learn(batch).metrics  # the network takes the uint8 images itself
    assert np.isfinite(out["losses/policy_loss"]) and np.isfinite(out["losses/value_loss"])


@pytest.mark.parametrize("kind,shape,units", [("nature_cnn", (84, 84, 4), 512),
                                              ("impala_cnn", (84, 84, 4), 256),
                                              ("impala_cnn", (20, 10, 1), 256)])
def test_encoders_output_shape(kind, shape, units):
    enc, n = encoder(kind, shape)
    x = torch.randint(0, 256, (3, *shape), dtype=torch.uint8)
    assert n == units and enc(x).shape == (3, units)


def test_an_encoder_that_does_not_fit_the_images_says_so():
    with pytest.raises(ValueError, match="impala_cnn for small images"):
        encoder("nature_cnn", (20, 10, 1))
    with pytest.raises(ValueError, match="image observations"):
        encoder("impala_cnn", (4,))
