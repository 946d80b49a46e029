"""Value normalisation (`algorithm.params.normalize_value`): running statistics
of the returns, a critic that learns scaled targets, and values that samplers
record in the returns' units, as the learner reads them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.conftest import CONFIGS
from verl_zmq.algos import make_algorithm
from verl_zmq.config import ConfigError, load_job
from verl_zmq.envs.make import env_spec
from verl_zmq.policy.numpy_actor import NumpyActor
from verl_zmq.policy.value_norm import ValueNorm

SMALL = ["algorithm.params.batch_size=64", "algorithm.params.minibatch_size=32",
         "algorithm.params.n_epochs=2"]


def _batch(rng: np.random.Generator, reward: float, T: int = 8, N: int = 8) -> dict:
    f = np.float32
    return {"obs": rng.standard_normal((T, N, 4)).astype(f),
            "action": rng.integers(0, 2, (T, N)), "reward": np.full((T, N), reward, f),
            "terminated": rng.random((T, N)) < 0.05, "truncated": np.zeros((T, N), bool),
            "valid": np.ones((T, N), bool),
            "logp": np.full((T, N), np.log(0.5), f), "value": np.zeros((T, N), f),
            "bootstrap_obs": rng.standard_normal((N, 4)).astype(f),
            "bootstrap_value": np.zeros(N, f)}


def test_the_statistics_are_those_of_every_return_seen():
    rng = np.random.default_rng(0)
    parts = [rng.normal(50.0, 7.0, n) for n in (10, 300, 1)]
    vn = ValueNorm()
    for x in parts:
        vn.update(x)
    every = np.concatenate(parts)
    assert float(vn.count) == every.size
    np.testing.assert_allclose(float(vn.mean), every.mean(), rtol=1e-5)
    np.testing.assert_allclose(float(vn.scale), every.std(), rtol=1e-4)
    y = torch.tensor([0.0, 50.0, 100.0])
    np.testing.assert_allclose(vn.denormalize(vn.normalize(y)).numpy(), y.numpy(), rtol=1e-5)
    vn.update(np.full(5, 3.0))  # equal returns alone would give a scale of 0: floored
    fresh = ValueNorm()
    fresh.update(np.full(5, 3.0))
    assert float(fresh.scale) > 0


def test_the_critic_learns_scaled_targets_and_samplers_record_returns_units():
    rng = np.random.default_rng(1)
    torch.manual_seed(0)
    job = load_job(CONFIGS / "cartpole_ppo.toml", [*SMALL, "algorithm.params.normalize_value=true"])
    plain_job = load_job(CONFIGS / "cartpole_ppo.toml", SMALL)
    spec = env_spec(job.environment)
    algo, plain = make_algorithm(job, spec), make_algorithm(plain_job, spec)
    plain.net.load_state_dict({k: v for k, v in algo.net.state_dict().items()
                               if not k.startswith("value_norm.")})
    batch = _batch(rng, 100.0)  # returns in the hundreds
    torch.manual_seed(1)
    scaled = algo.learn(dict(batch)).metrics["losses/value_loss"]
    torch.manual_seed(1)
    raw = plain.learn(dict(batch)).metrics["losses/value_loss"]
    # the same batch's value error, in the returns' units against about 1 once scaled
    assert raw > 100 * scaled and scaled < 10
    vn = algo.value_norm
    assert vn is not None and float(vn.mean) > 100 and float(vn.count) == 64
    arrays = algo.policy_arrays()
    assert {"value_norm.mean", "value_norm.scale"} <= set(arrays)
    actor = NumpyActor(job, spec)
    actor.load_policy_arrays(arrays)
    obs = rng.standard_normal((32, 4)).astype(np.float32)
    _, ex_np = actor.act(obs, deterministic=True)
    _, ex_t = algo.act(obs, deterministic=True)
    np.testing.assert_allclose(ex_np["value"], ex_t["value"], rtol=1e-4, atol=1e-3)
    assert float(np.mean(ex_t["value"])) > 50  # the returns' units, not the scaled ones
    # a checkpoint carries the statistics
    again = make_algorithm(job, spec)
    again.load_state_dict(algo.state_dict())
    assert again.value_norm is not None and float(again.value_norm.mean) == float(vn.mean)


def test_recurrent_policies_are_refused_by_the_job_check():
    with pytest.raises(ConfigError, match="normalize_value"):
        load_job(CONFIGS / "cartpole_ppo.toml", [
            "algorithm.params.normalize_value=true", 'algorithm.policy.recurrent="lstm"'])
