"""The decoupled objective for stale fragments (AReaL's): the ratio clipped
around the policy as the update starts, each step weighted by that policy over
the sampler's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.conftest import CONFIGS
from tests.golden import _collected_batch
from verl_zmq.algos import make_algorithm
from verl_zmq.algos.base import Progress
from verl_zmq.config import ConfigError, load_job
from verl_zmq.envs.make import env_spec


def _learner(*sets: str):
    torch.manual_seed(0)
    job = load_job(CONFIGS / "cartpole_ppo.toml",
                   ["algorithm.params.n_epochs=1", "algorithm.params.batch_size=256",
                    "algorithm.params.minibatch_size=256", *sets])
    algo = make_algorithm(job, env_spec(job.environment))
    return job, algo


def _update(sets: tuple[str, ...], behaviour_shift: float):
    job, algo = _learner(*sets)
    batch = _collected_batch(job, algo, env_spec(job.environment), 2)
    # the sampler's policy gave each action a probability exp(shift) times the current
    batch = {**batch, "logp": np.asarray(batch["logp"], np.float32) + behaviour_shift}
    torch.manual_seed(1)
    out = algo.learn(batch, Progress(env_steps=1000, fraction=0.1))
    return out.metrics, [p.detach().clone() for p in algo.net.parameters()]


def test_fresh_fragments_learn_as_the_standard_objective_does():
    std, p_std = _update((), 0.0)
    dec, p_dec = _update(("algorithm.params.decoupled_loss=true",), 0.0)
    # the samplers' log-probabilities (numpy) and the learner's differ by rounding only
    assert dec["actor/behav_imp_weight"] == pytest.approx(1.0, abs=1e-4)
    for a, b in zip(p_std, p_dec, strict=True):
        assert torch.allclose(a, b, atol=1e-5)
    assert dec["losses/policy_loss"] == pytest.approx(std["losses/policy_loss"], abs=1e-5)


def test_stale_fragments_are_clipped_around_the_proximal_policy():
    # behaviour log-probabilities 0.5 lower: ratios of exp(0.5) to the behaviour, all
    # outside the clip of 0.2, so the standard objective clips every step
    std, _ = _update((), -0.5)
    dec, _ = _update(("algorithm.params.decoupled_loss=true",), -0.5)
    assert std["losses/clip_fraction"] > 0.99
    assert dec["losses/clip_fraction"] == pytest.approx(0.0, abs=1e-6)
    assert dec["actor/behav_imp_weight"] == pytest.approx(np.exp(0.5), rel=1e-3)
    capped, _ = _update(("algorithm.params.decoupled_loss=true",
                         "algorithm.params.behav_imp_weight_cap=1.2"), -0.5)
    assert capped["actor/behav_imp_weight"] == pytest.approx(1.2, rel=1e-5)


def test_what_it_cannot_do_is_refused():
    with pytest.raises(ConfigError, match="decoupled_loss"):
        load_job(CONFIGS / "cartpole_ppo.toml", ["algorithm.params.decoupled_loss=true",
                                                 "algorithm.policy.recurrent=\"gru\""])
    with pytest.raises(ConfigError, match="behav_imp_weight_cap"):
        load_job(CONFIGS / "cartpole_ppo.toml", ["algorithm.params.behav_imp_weight_cap=2"])
    # a Hugging Face model takes it (tests/test_hf_ppo.py)
    load_job(CONFIGS / "reverse_hf_grpo.toml", ["algorithm.params.decoupled_loss=true"])
