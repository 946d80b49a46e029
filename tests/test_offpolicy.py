"""Off-policy end to end in one process: samplers -> prioritised shard (n-step
transitions, limiter) -> DQN learner -> priority updates back to the shard."""

from __future__ import annotations

import json

import pytest

from tests.conftest import CONFIGS, verl


@pytest.mark.timeout(300)
def test_dqn_pipeline_runs_and_updates_priorities(tmp_path):
    r = verl("run", str(CONFIGS / "cartpole_dqn.toml"), "--run-dir", str(tmp_path),
             "--set", "training.total_timesteps=6000", "--set", "evaluation.interval_steps=3000",
             "--set", "replay.min_size_to_sample=500", "--set", "logging.interval_s=0.5",
             timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    evs = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    replay = [e for e in evs if e.get("event") == "metrics" and e.get("role") == "replay"]
    assert replay and replay[-1]["replay/priority_updates"] > 0
    assert replay[-1]["replay/sampled"] > 0 and replay[-1]["replay/transitions"] > 0
    learner = [e for e in evs if e.get("event") == "training_finished"]
    assert learner and learner[0]["env_steps"] >= 6000 and learner[0]["updates"] > 0
    assert any(e.get("event") == "evaluated" for e in evs)


@pytest.mark.timeout(300)
def test_sac_pipeline_runs_on_pendulum(tmp_path):
    r = verl("run", str(CONFIGS / "pendulum_sac.toml"), "--run-dir", str(tmp_path),
             "--set", "training.total_timesteps=1500", "--set", "evaluation.interval_steps=1000",
             "--set", "evaluation.n_eval_episodes=2", "--set", "replay.min_size_to_sample=500",
             "--set", "algorithm.params.learning_starts=500",
             "--set", "replay.samples_per_insert=8", "--set", "replay.error_buffer=2000",
             timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    evs = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
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
    from verl_zmq.envs import EnvSpec

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


@pytest.mark.timeout(300)
def test_two_shards_are_both_sampled(tmp_path):
    r = verl("run", str(CONFIGS / "cartpole_dqn.toml"), "--run-dir", str(tmp_path),
             "--set", "launch.replay_shards=2", "--set", "training.total_timesteps=6000",
             "--set", "replay.min_size_to_sample=300", "--set", "logging.interval_s=0.5",
             "--set", "evaluation.interval_steps=6000", timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    evs = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    last = {}
    for e in evs:
        if e.get("event") == "metrics" and e.get("role") == "replay":
            last[e["id"]] = e
    assert set(last) == {"replay-0", "replay-1"}
    assert all(m["replay/sampled"] > 0 and m["replay/transitions"] > 0 for m in last.values())
