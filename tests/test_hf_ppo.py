"""The Hugging Face learner's PPO with a critic (verl's `adv_estimator = "gae"`): a
value head on the last hidden state fits the responses' returns, its loss
clipped around the values as the update began; during `critic_warmup` the head
alone learns; a critic without a weight, or `ppo` by name, is refused with the
way. And its decoupled objective for stale rollouts: on fresh ones the update
it makes is the standard one's."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402

from tests.conftest import CONFIGS  # noqa: E402
from verl_zmq.config import load_job  # noqa: E402

JOB = CONFIGS / "reverse_hf_grpo.toml"
PPO = ('algorithm.params.adv_estimator="gae"', "algorithm.params.vf_coef=0.5",
       "algorithm.params.gae_lambda=0.9")


def _setup(tmp_path, *sets: str):
    from verl_zmq.algos import make_algorithm
    from verl_zmq.batch import job_layout
    from verl_zmq.envs.make import env_spec
    from verl_zmq.seq.generate import GenerateCollector
    from verl_zmq.seq.toy_prompts import toy_rows, write_prompts

    write_prompts(tmp_path / "t.parquet", toy_rows("reverse", 16, seed=1))
    job = load_job(JOB, [f"environment.kwargs.train_files={tmp_path / 't.parquet'}",
                         "environment.kwargs.val_files=", "sampling.num_envs_per_worker=16",
                         # a reward that varies (the response's length): returns to fit
                         "environment.kwargs.reward=tests.test_hf_posttrain:length_score",
                         "algorithm.params.learning_rate=3e-3", *sets])
    spec = env_spec(job.environment)
    torch.manual_seed(0)
    learner = make_algorithm(job, spec)
    sampler = make_algorithm(job, spec)
    sampler.load_policy_arrays(learner.policy_arrays())  # the rollouts are fresh
    col = GenerateCollector(job, sampler, 0, 1)
    batch = job_layout(job, spec).concat([col.collect()[0] for _ in range(2)])
    return learner, batch


def _weights(module: torch.nn.Module) -> list[torch.Tensor]:
    return [t.detach().clone() for t in module.parameters()]


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_the_value_head_fits_the_returns(tmp_path):
    learner, batch = _setup(tmp_path, *PPO, "algorithm.params.clip_range_vf=0.2")
    assert learner.critic is not None and "critic" in learner.state_dict()
    losses = [learner.learn(batch).metrics["losses/value_loss"] for _ in range(8)]
    assert all(np.isfinite(losses)) and losses[-1] < 0.5 * losses[0], losses
    r = learner._prepare(batch)  # the advantages are whitened over the learned tokens
    adv = r.adv.cpu().numpy()[r.learn]
    assert abs(adv.mean()) < 1e-4 and adv.std() == pytest.approx(1.0, abs=1e-2)


def test_during_the_critics_warm_up_the_head_alone_learns(tmp_path):
    learner, batch = _setup(tmp_path, *PPO, "algorithm.params.critic_warmup=1")
    model, head = _weights(learner.model), _weights(learner.critic)
    learner.learn(batch)
    assert _same(model, _weights(learner.model)) and not _same(head, _weights(learner.critic))
    learner.learn(batch)
    assert not _same(model, _weights(learner.model))


def test_a_critic_without_a_weight_and_ppo_by_name_are_refused_with_the_way(tmp_path):
    with pytest.raises(ValueError, match="vf_coef"):
        _setup(tmp_path, 'algorithm.params.adv_estimator="gae"')
    from tests.conftest import verl_here

    r = verl_here("check", str(JOB), "--set", 'algorithm.name="ppo"')
    assert r.returncode != 0 and 'adv_estimator = "gae"' in r.stderr, r.stderr


def test_the_decoupled_objective_on_fresh_rollouts_is_the_standard_update(tmp_path):
    after = []
    for sets in ((), ("algorithm.params.decoupled_loss=true",)):
        learner, batch = _setup(tmp_path, *sets)
        torch.manual_seed(1)
        got = learner.learn(batch).metrics
        after.append(_weights(learner.model))
        if sets:  # the sampler's policy is the learner's: every weight about 1
            assert got["actor/behav_imp_weight"] == pytest.approx(1.0, abs=1e-3)
    assert all(torch.allclose(x, y, atol=1e-5) for x, y in zip(*after, strict=True))
