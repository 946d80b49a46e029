"""Recurrent policies: the numpy LSTM/GRU step equals torch's, and the log-
probabilities and values a sampler records for a fragment are the ones the
learner computes from the fragment's columns and shipped state, across
episode ends inside it and across fragments."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.conftest import CONFIGS
from verl_zmq.algos import make_algorithm
from verl_zmq.batch import FIRST, STATE, job_layout
from verl_zmq.config import load_job
from verl_zmq.envs.make import env_spec, make_vector_env
from verl_zmq.policy.numpy_actor import NumpyActor
from verl_zmq.sampling.collector import EnvCollector


def _job(cell: str, *more: str):
    return load_job(CONFIGS / "cartpole_novel_lstm.toml",
                    [f"algorithm.policy.recurrent={cell!r}".replace("'", '"'),
                     "algorithm.policy.recurrent_size=16", "sampling.fragment_length=64",
                     "environment.normalize_obs=false", *more])


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_numpy_step_equals_torch(cell):
    job = _job(cell)
    spec = env_spec(job.environment)
    actor = NumpyActor(job, spec)
    algo = make_algorithm(job, spec)
    # version-0 weights are the same arrays on both sides; perturb them to test more
    rng = np.random.default_rng(1)
    arrays = {k: (v + 0.3 * rng.standard_normal(v.shape)).astype(np.float32)
              for k, v in algo.policy_arrays().items()}
    actor.load_policy_arrays(arrays)
    algo.load_policy_arrays(arrays)
    obs = rng.standard_normal((5, 2)).astype(np.float32)
    state = rng.standard_normal((5, actor.state_size)).astype(np.float32)
    first = np.array([True, False, False, True, False])
    a, ex = actor.act(obs, deterministic=True, state=(state, first))
    b, ey = algo.act(obs, deterministic=True, state=(state, first))
    np.testing.assert_array_equal(a, b)
    for k in ("logp", "value", "rnn_state"):
        np.testing.assert_allclose(ex[k], ey[k], atol=1e-5)
    # a reset env's state is zeros whatever was passed
    a0, e0 = actor.act(obs[:1], deterministic=True, state=(np.zeros_like(state[:1]), first[:1]))
    np.testing.assert_allclose(e0["rnn_state"], ex["rnn_state"][:1], atol=1e-6)


@pytest.mark.parametrize("cell,recurrence", [("lstm", 0), ("gru", 16)])
def test_sampler_and_learner_log_probs_agree(cell, recurrence):
    job = _job(cell, f"algorithm.params.recurrence={recurrence}")
    spec = env_spec(job.environment)
    actor = NumpyActor(job, spec)
    venv, seeds = make_vector_env(job.environment, 3, 0, 1)
    col = EnvCollector(job, actor, venv, seeds)
    learner = make_algorithm(job, spec)
    learner.load_policy_arrays(actor.arrays)
    layout = job_layout(job, spec)
    for _ in range(2):  # the second fragment starts from a carried state
        a, _ = col.collect()
        assert layout.problem(a) == ""
        valid = a["valid"]
        # episodes end inside the fragment (a random policy drops the pole soon)
        ends = (a["terminated"] | a["truncated"])[:-2]
        assert ends.any() and a[FIRST][1:].any()
        logp, value, boot, starts = learner._sequence_pass(dict(a))
        np.testing.assert_allclose(logp[valid], a["logp"][valid], atol=1e-5)
        np.testing.assert_allclose(value[valid], a["value"][valid], atol=1e-5)
        np.testing.assert_allclose(boot, a["bootstrap_value"], atol=1e-5)
        np.testing.assert_array_equal(starts[0], a[STATE])
    assert np.abs(a[STATE]).sum() > 0  # the carried state is not zeros


@pytest.mark.parametrize("vtrace", [False, True])
def test_recurrent_update_learns_from_the_shipped_state(vtrace):
    """An update runs on sequences of `recurrence` steps; its first epoch's ratio is
    1 (the learner's log-probabilities are the sampler's), with GAE or V-trace."""
    job = _job("lstm", "algorithm.params.recurrence=16", "algorithm.params.n_epochs=1",
               "algorithm.params.minibatch_size=256", f"algorithm.params.vtrace={vtrace}".lower())
    spec = env_spec(job.environment)
    actor = NumpyActor(job, spec)
    venv, seeds = make_vector_env(job.environment, 4, 0, 1)
    col = EnvCollector(job, actor, venv, seeds)
    learner = make_algorithm(job, spec)
    a, _ = col.collect()
    out = learner.learn(job_layout(job, spec).concat([a])).metrics
    assert abs(out["losses/approx_kl"]) < 1e-6 and out["losses/clip_fraction"] == 0.0
    assert out["charts/batch_steps"] == float(a["valid"].sum())
    before = learner.policy_arrays()["core.weight_hh"].copy()
    torch.manual_seed(0)
    learner.learn(job_layout(job, spec).concat([col.collect()[0]]))
    assert not np.allclose(before, learner.policy_arrays()["core.weight_hh"])


def test_a_convolutional_recurrent_policy_acts_in_torch_and_agrees_with_its_learner():
    from verl_zmq.policy.numpy_actor import make_actor

    job = load_job(CONFIGS / "catch_ppo.toml", ['algorithm.policy.recurrent="gru"',
                                                "algorithm.policy.recurrent_size=16"])
    spec = env_spec(job.environment)
    actor = make_actor(job, spec, (0, 1), (0, 0), threads=1)
    assert not isinstance(actor, NumpyActor) and actor.state_size == 16
    venv, seeds = make_vector_env(job.environment, 2, 0, 1)
    col = EnvCollector(job, actor, venv, seeds)
    learner = make_algorithm(job, spec)
    learner.load_policy_arrays(actor.policy_arrays())
    a, _ = col.collect()
    logp, value, _, _ = learner._sequence_pass(dict(a))
    valid = a["valid"]
    np.testing.assert_allclose(logp[valid], a["logp"][valid], atol=1e-5)
    np.testing.assert_allclose(value[valid], a["value"][valid], atol=1e-5)
