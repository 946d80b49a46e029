"""Off-policy end to end in one process: samplers -> prioritised shard (n-step
transitions, limiter) -> DQN learner -> priority updates back to the shard."""

from __future__ import annotations

import pytest

from tests.conftest import CONFIGS, run_events


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_dqn_pipeline_runs_and_updates_priorities(tmp_path):
    evs = run_events("cartpole_dqn.toml", tmp_path, "training.total_timesteps=4000",
                     "evaluation.interval_steps=3000", "replay.min_size_to_sample=500",
                     "logging.interval_s=0.5")
    replay = [e for e in evs if e.get("event") == "metrics" and e.get("role") == "replay"]
    assert replay and replay[-1]["replay/priority_updates"] > 0
    assert replay[-1]["replay/sampled"] > 0 and replay[-1]["replay/transitions"] > 0
    learner = [e for e in evs if e.get("event") == "training_finished"]
    assert learner and learner[0]["env_steps"] >= 4000 and learner[0]["updates"] > 0
    assert any(e.get("event") == "evaluated" for e in evs)


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_sac_pipeline_runs_on_pendulum(tmp_path):
    evs = run_events("pendulum_sac.toml", tmp_path, "training.total_timesteps=1500",
                     "evaluation.interval_steps=1000", "evaluation.n_eval_episodes=2",
                     "replay.min_size_to_sample=500", "algorithm.params.learning_starts=500",
                     "replay.samples_per_insert=8", "replay.error_buffer=2000")
    done = [e for e in evs if e.get("event") == "training_finished"]
    assert done and done[0]["updates"] > 0
    assert any(e.get("event") == "evaluated" and e["eval/return_mean"] < 0 for e in evs)


def test_sac_target_with_entropy_by_hand():
    import torch

    from verl_zmq.algos.sac import sac_target

    y = sac_target(torch.tensor([1.0, 5.0]), torch.tensor([2.0, 3.0]),
                   torch.tensor([-1.0, 0.5]), 0.2, torch.tensor([0.5, 1.0]),
                   torch.tensor([0.9, 0.0]))
    # min(Q1', Q2') - alpha * log pi: 1 + 0.2 = 1.2 -> 0.5 + 0.9 * 1.2; terminated: reward only
    assert y.tolist() == pytest.approx([0.5 + 0.9 * 1.2, 1.0])


def test_squashed_gaussian_log_prob_matches_change_of_variables():
    import torch

    from verl_zmq.algos.sac import SquashedGaussian
    from verl_zmq.config import load_job
    from verl_zmq.envs.make import EnvSpec

    job = load_job(CONFIGS / "pendulum_sac.toml")
    pi = SquashedGaussian(EnvSpec((3,), False, 1, (1,), (-2.0,), (2.0,)), job.algorithm.policy)
    torch.manual_seed(0)
    obs = torch.randn(5, 3)
    a, logp = pi(obs)
    mu, log_std = pi.net(obs).chunk(2, -1)
    u = torch.atanh(a.clamp(-0.999999, 0.999999))
    normal = torch.distributions.Normal(mu, log_std.clamp(-5, 2).exp())
    expected = (normal.log_prob(u) - torch.log(1 - a ** 2)).sum(-1)
    assert torch.allclose(logp, expected, atol=1e-3)
    assert (a.abs() < 1).all()


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_two_shards_are_both_sampled(tmp_path):
    evs = run_events("cartpole_dqn.toml", tmp_path, "launch.replay_shards=2",
                     "training.total_timesteps=4000", "replay.min_size_to_sample=300",
                     "logging.interval_s=0.5", "evaluation.interval_steps=4000")
    last = {}
    for e in evs:
        if e.get("event") == "metrics" and e.get("role") == "replay":
            last[e["id"]] = e
    assert set(last) == {"replay-0", "replay-1"}
    assert all(m["replay/sampled"] > 0 and m["replay/transitions"] > 0 for m in last.values())
