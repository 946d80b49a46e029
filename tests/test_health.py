"""Health warnings (`logging.health`, verl_zmq/learning/health.py): each kind
from a stream of metrics that shows it, once, with its remedy; then each from a
real job made to show it, and none from the main job. Triggers are what the
job does (its rewards, coefficients, pacing), never how fast it runs; where a
threshold is lowered, it is lowered so far that any run of that job crosses it."""

from __future__ import annotations

import json
import math

import pytest

from tests.conftest import CONFIGS, verl
from verl_zmq.config import load_job
from verl_zmq.envs.spec import EnvSpec
from verl_zmq.learning.health import HealthWatch, ShardHealth, max_entropy

JOB = load_job(CONFIGS / "cartpole_ppo.toml", ["logging.health.grace_updates=2",
                                                "logging.health.patience_updates=3",
                                                "logging.health.entropy_stuck_updates=4",
                                                "logging.health.ev_updates=4",
                                                "logging.health.lag_reports=4",
                                                "logging.health.lag_rise=1.0",
                                                "logging.health.no_signal_updates=3"])


def _kinds(watch: HealthWatch, stream: list[dict[str, float]]) -> list[str]:
    return [ev for m in stream for ev, _ in watch.update(m)]


def test_entropy_is_judged_against_log_n_for_plain_choices_only():
    assert max_entropy(EnvSpec((4,), True, 2, ())) == pytest.approx(math.log(2))
    assert max_entropy(EnvSpec((3,), False, 1, (1,))) == 0.0  # a Gaussian has no maximum
    assert max_entropy(EnvSpec((4,), True, 6, (2,), nvec=(3, 3))) == 0.0
    assert max_entropy(EnvSpec((4,), True, 4, (), mask="mask")) == 0.0


def test_entropy_collapsed_and_stuck_at_max_once_each():
    w = HealthWatch(JOB, math.log(2))
    low = [{"losses/entropy": 0.001}] * 8
    assert _kinds(w, low) == ["health_entropy_collapsed"]  # after 2 of grace, 3 in a row
    assert _kinds(w, low) == []  # once
    w = HealthWatch(JOB, math.log(2))
    assert _kinds(w, [{"losses/entropy": 0.69}] * 3 + [{"losses/entropy": 0.3}]
                  + [{"losses/entropy": 0.69}] * 3) == []  # a dip resets the streak
    out = w.update({"losses/entropy": 0.69})
    assert [e for e, _ in out] == ["health_entropy_stuck_at_max"]
    assert "reward" in out[0][1]["remedy"]
    assert _kinds(HealthWatch(JOB, 0.0), low) == []  # no maximum known: no judgement


def test_gradient_spikes_and_non_finite_numbers():
    w = HealthWatch(JOB)
    calm = [{"losses/grad_norm": 1.0 + 0.01 * (i % 5)} for i in range(25)]
    assert _kinds(w, calm + [{"losses/grad_norm": 50.0}] + calm[:5]) == []  # a lone one
    assert _kinds(w, [{"losses/grad_norm": 50.0}]) == []
    out = w.update({"losses/grad_norm": 60.0})
    assert [e for e, _ in out] == ["health_grad_spike"] and out[0][1]["factor"] > 10
    # clipped to 0.5, the same norms take steps of one size: no spike reaches the weights
    w = HealthWatch(JOB, clip=0.5)
    burst = [{"losses/grad_norm": 50.0}] * 3
    assert _kinds(w, calm + burst + calm[:5] + burst) == []
    w = HealthWatch(JOB)
    assert _kinds(w, [{"losses/grad_norm": float("nan")}]) == ["health_grad_not_finite"]
    assert _kinds(w, [{"losses/value_loss": float("inf")}]) == ["health_value_loss_not_finite"]


def test_a_step_whose_gradient_is_not_finite_is_skipped():
    """Clipping by a NaN norm would make every weight NaN: the step is skipped."""
    import torch

    from verl_zmq.algos.base import clip_grad_norm, step_if_finite

    net = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(net.parameters(), lr=0.1)
    before = [p.detach().clone() for p in net.parameters()]
    (net(torch.tensor([[1.0, float("nan"), 0.0]])).sum()).backward()
    assert not step_if_finite(opt, clip_grad_norm(list(net.parameters()), 0.5))
    assert all(torch.equal(a, b) for a, b in zip(before, net.parameters(), strict=True))
    assert not opt.state  # nor did the optimiser's moments take it in
    (net(torch.ones(1, 3)).sum()).backward()
    assert step_if_finite(opt, clip_grad_norm(list(net.parameters()), 0.5))
    assert not torch.equal(before[0], net.weight) and torch.isfinite(net.weight).all()


def test_a_value_loss_that_explodes_and_a_critic_that_explains_nothing():
    w = HealthWatch(JOB)
    early = [{"losses/value_loss": 1.0}] * 22  # 2 of grace, then 20 for the early median
    assert _kinds(w, early) == []
    assert _kinds(w, [{"losses/value_loss": 5000.0}]) == ["health_value_loss_exploding"]
    w = HealthWatch(JOB)
    bad = {"losses/explained_variance": -0.5, "losses/value_target_spread": 0.5}
    # near-constant targets (a solved task) say nothing, and reset the window
    flat = {"losses/explained_variance": -3.0, "losses/value_target_spread": 0.01}
    assert _kinds(w, [bad] * 5 + [flat] + [bad] * 3) == []
    assert _kinds(w, [bad]) == ["health_critic_explains_nothing"]
    # a critic scattered around 0 (the best one on a solved task's noise) is not
    # below the floor; one that is worse on the whole is
    w = HealthWatch(JOB)
    mixed = [{**bad, "losses/explained_variance": v} for v in (0.1, -0.3, 0.05, -0.1)]
    assert _kinds(w, [bad] * 2 + mixed) == []
    worse = [{**bad, "losses/explained_variance": v} for v in (0.1, -0.9, 0.05, -0.3)]
    assert _kinds(w, worse) == ["health_critic_explains_nothing"]


def test_post_training_no_signal_and_kl_running_away():
    w = HealthWatch(JOB)
    assert _kinds(w, [{"grpo/no_signal_groups": 1.0}] * 2 + [{"grpo/no_signal_groups": 0.9}]
                  + [{"grpo/no_signal_groups": 1.0}] * 2) == []
    out = w.update({"grpo/no_signal_groups": 1.0})
    assert out[0][0] == "health_no_learning_signal" and "verl sft" in out[0][1]["remedy"]
    w = HealthWatch(JOB)
    assert _kinds(w, [{"charts/kl_ref": 2.0}] * 3) == ["health_kl_running_away"]


def test_reports_policy_lag_stale_fragments_and_gossip():
    w = HealthWatch(JOB)
    w.updates = 100  # past the grace
    said = [ev for lag in (0.5, 1.5, 1.0, 1.8, 2.2, 2.9)
            for ev, _ in w.report("learner", {"learner/policy_lag_mean": lag})]
    assert said == ["health_policy_lag_growing"]  # 1.0 broke the first window
    # reports that saw no new update repeat a lag: they do not count toward the window
    w = HealthWatch(JOB)
    w.updates = 100
    slow = [(u, lag) for u, lag in ((1, 0.5), (2, 1.5), (3, 1.8), (4, 2.2), (5, 2.9))
            for _ in range(3)]  # three reports an update: a learner slower than them
    said = [ev for u, lag in slow for ev, _ in w.report(
        "learner", {"learner/policy_lag_mean": lag, "learner/updates": u})]
    assert said == ["health_policy_lag_growing"] and list(w.lags) == [1.5, 1.8, 2.2, 2.9]
    assert w.report("learner", {"learner/policy_lag_mean": 9.0, "final": True}) == []
    w = HealthWatch(JOB)
    w.updates = 100
    took = {"learner/fragments_dropped": 0, "learner/fragments_from": {"s0": 10, "s1": 10}}
    assert w.report("learner", took) == []
    out = w.report("learner", {"learner/fragments_dropped": 30,
                               "learner/fragments_from": {"s0": 15, "s1": 15}})
    assert [e for e, _ in out] == ["health_fragments_too_old"]
    w = HealthWatch(JOB)
    said = []
    for i in range(1, 6):  # 100 gradients used per report, each waiting 200 ms
        said += [e for e, _ in w.report("peer", {"gossip/grad_used": 100 * i,
                                                 "gossip/grad_queue_delay_ms": 200.0,
                                                 "gossip/grad_received": 100 * i,
                                                 "gossip/grad_stale_dropped": 60 * i})]
    assert said == ["health_gossip_stale", "health_gossip_delay"]


def test_a_shard_says_when_samples_per_insert_is_far_from_its_target():
    job = load_job(CONFIGS / "cartpole_dqn.toml")  # samples_per_insert 32
    s = ShardHealth(job)
    steady = [{"replay/transitions": 100 * i, "replay/sampled": 3200 * i} for i in range(5)]
    assert [r for m in steady for r in s.report(m)] == []
    s = ShardHealth(job)
    off = [{"replay/transitions": 100 * i, "replay/sampled": 200 * i} for i in range(5)]
    said = [e for m in off for e, _ in s.report(m)]
    assert said == ["health_replay_ratio"]
    assert ShardHealth(load_job(CONFIGS / "cartpole_ppo.toml")).report(off[1]) == []


# -- jobs made to show each kind ----------------------------------------------------

G = ("logging.health.grace_updates=5", "logging.health.patience_updates=5")
SCALE = '{{wrapper = "tests.envs:RewardScaleAfter", kwargs = {{after = {}, factor = {}}}}}'
JOBS = {
    # ent_coef 0 and a step size 250 times the job's: the policy turns deterministic
    "entropy_collapsed": ("cartpole_ppo.toml", "training.total_timesteps=12000",
                          "algorithm.params.ent_coef=0", "algorithm.params.learning_rate=0.5",
                          "algorithm.params.max_grad_norm=100"),
    # a step size of 1e-9: the policy stays uniform
    "entropy_stuck_at_max": ("cartpole_ppo.toml", "training.total_timesteps=6000",
                             "algorithm.params.learning_rate=1e-9",
                             "logging.health.entropy_stuck_updates=10"),
    # no value loss in the objective and returns a hundredth of CartPole's: the critic's
    # untrained outputs vary far more than the returns do
    "critic_explains_nothing": ("cartpole_ppo.toml", "training.total_timesteps=6000",
                                "algorithm.params.vf_coef=0",
                                f"environment.wrappers=[{SCALE.format(0, 0.01)}]",
                                "logging.health.ev_updates=5"),
    # rewards a thousand times larger from each env's 1000th step on, and no clipping
    # of the gradient's norm to keep them from the step
    "grad_spike": ("cartpole_ppo.toml", "training.total_timesteps=14000",
                   f"environment.wrappers=[{SCALE.format(1000, 1000.0)}]",
                   "algorithm.params.max_grad_norm=1e9"),
    # every response scores 0
    "no_learning_signal": ("digitsum_grpo.toml", "training.total_timesteps=20000",
                           'environment.kwargs.reward="tests.envs:zero_reward"',
                           "evaluation.interval_steps=1000000",
                           "logging.health.no_signal_updates=3"),
    # any move away from the reference crosses a limit of 1e-7
    "kl_running_away": ("digitsum_grpo.toml", "training.total_timesteps=20000",
                        "evaluation.interval_steps=1000000", "logging.health.kl_max=1e-7",
                        "logging.health.patience_updates=2"),
    # samplers never wait for params, nothing is too old to train on, and the learner
    # runs 10 epochs of each batch: the queue of fragments grows from the start
    "policy_lag_growing": ("cartpole_ppo.toml", "training.total_timesteps=5000",
                           "sampling.max_fragments_ahead=1000", "sampling.lead_updates=0",
                           "replay.capacity=1000000", "training.max_policy_lag=100000",
                           "algorithm.params.n_epochs=10", "logging.interval_s=0.3",
                           "logging.health.lag_reports=10", "logging.health.lag_rise=1.0"),
    # nothing older than the current version is trained on, and samplers never wait
    # for params: many fragments come one version or more behind (about 0.4-0.5 of them
    # on 2 cores, busy or not: the warning's share is set well below that)
    "fragments_too_old": ("cartpole_ppo.toml", "training.total_timesteps=20000",
                          "training.max_policy_lag=0", "sampling.lead_updates=0",
                          "sampling.max_fragments_ahead=1000", "algorithm.params.n_epochs=10",
                          "logging.interval_s=0.5", "logging.health.grace_updates=2",
                          "logging.health.stale_share=0.15"),
    # a target of 0.05 samples per insert with the limiter's slack unbounded: one batch
    # of 64 per 1,280 inserts would be too many
    "replay_ratio": ("cartpole_dqn.toml", "training.total_timesteps=30000",
                     "replay.samples_per_insert=0.05", "replay.error_buffer=1000000000",
                     "logging.interval_s=0.5"),
    # any queue delay over 1e-4 ms, any share of stale gradients over 1%: none are 0
    # (a gradient waits for its receiver's update to end; grad_staleness 0 drops one
    # that waited through one)
    "gossip_delay": ("cartpole_dapo.toml", "training.total_timesteps=12000",
                     'gossip.share="gradients"', "logging.health.gossip_delay_ms=0.0001",
                     "gossip.grad_staleness=0",
                     "logging.health.stale_share=0.01", "logging.interval_s=1"),
}
ALSO = {"grad_spike": "value_loss_exploding", "gossip_delay": "gossip_stale"}


@pytest.mark.e2e
@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", list(JOBS))
def test_a_job_made_to_show_it_warns_once_with_its_remedy(kind, tmp_path):
    job, *sets = JOBS[kind]
    args = [x for s in (*G, *sets) for x in ("--set", s)]
    r = verl("run", str(CONFIGS / job), "--run-dir", str(tmp_path / "run"), *args,
             timeout=280)
    assert r.returncode == 0, r.stderr[-2000:]
    events = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    said = [e for e in events if str(e.get("event", "")).startswith("health_")]
    for k in [kind] + ([ALSO[kind]] if kind in ALSO else []):
        mine = [e for e in said if e["event"] == f"health_{k}"]
        assert mine, f"no health_{k}: {[e['event'] for e in said]}"
        # once per process: a job with several trainers (DAPO's peers) says it once each
        assert len(mine) == len({e["id"] for e in mine}) and mine[0]["remedy"]
        assert mine[0]["level"] == "warning"


@pytest.mark.e2e
def test_the_main_job_raises_none_and_the_launcher_shows_a_kind_once(cartpole_run, tmp_path,
                                                                     ports):
    """The README's main job (a session's shared run, to 475 with a sampler killed):
    no health warning. A job that raises one has it on the terminal and in
    summary.json's warnings."""
    from tests.conftest import launch, read_events

    logs = list((cartpole_run["run"] / "logs").glob("*.jsonl"))
    assert logs and not [e for p in logs for e in read_events(p)
                         if str(e.get("event", "")).startswith("health_")]
    run = tmp_path / "run"
    sets = (*G, *JOBS["entropy_stuck_at_max"][1:], f"launch.port_range=[{ports[0]}, {ports[1]}]")
    r = launch("local", str(CONFIGS / "cartpole_ppo.toml"), "--run-dir", str(run),
               *[x for s in sets for x in ("--set", s)], timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stderr.count("health_entropy_stuck_at_max") == 2  # the line and the closing
    summary = json.loads((run / "summary.json").read_text())
    kinds = {w["event"]: w for w in summary["warnings"]}
    assert "remedy=" in kinds["health_entropy_stuck_at_max"]["first"]


@pytest.mark.e2e
@pytest.mark.timeout(200)
def test_non_finite_numbers_are_said_at_once_and_end_the_job_with_the_cause(tmp_path):
    """Rewards of 1e38 a step: returns overflow float32, the value loss and the
    gradients are no longer finite, and both are said at once. Each such step is
    skipped (the params stay finite: no sampler's fragment is rejected), and after
    training.max_nonfinite_updates of them the job ends, non-zero, with the cause,
    long before its budget."""
    r = verl("run", str(CONFIGS / "cartpole_ppo.toml"), "--run-dir", str(tmp_path / "run"),
             "--set", "training.total_timesteps=1000000", "--set",
             "training.max_nonfinite_updates=5",
             "--set", f"environment.wrappers=[{SCALE.format(0, 1e38)}]", timeout=180)
    assert r.returncode != 0
    assert "5 updates in a row had a loss or gradient that is not finite" in r.stderr
    assert "environment.normalize_reward" in r.stderr
    events = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    said = {e["event"] for e in events}
    assert {"health_grad_not_finite", "health_value_loss_not_finite", "cannot_go_on"} <= said
    last = {e["id"]: e for e in events if e["event"] == "metrics"}
    assert last["learner-0"]["learner/fragments_rejected"] == 0
    assert all(e.get("replay/rejected", 0) == 0 for e in last.values())
    assert last["learner-0"]["learner/env_steps"] < 100_000
