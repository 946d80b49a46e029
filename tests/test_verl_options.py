"""verl's learner options as registered functions, by hand: the leave-one-out and
REINFORCE++ advantage estimators, the four loss aggregations, dual-clip PPO, the
KL estimators (k3 clamped as verl's low_var_kl), the adaptive KL coefficient,
DAPO's overlong penalty, and `filter_groups` marking out groups without signal
and counting what is left."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from verl_zmq.algos import core, grouped
from verl_zmq.batch import episodes
from verl_zmq.config import algo_params, load_job

JOB = "configs/reverse_grpo.toml"


def _one_step_responses(scores, group_size, **params):
    """A batch of one-token responses, one per column, and its AdvantageInput."""
    r = np.asarray(scores, np.float32)[None]
    done = np.ones_like(r, bool)
    batch = {"reward": r, "valid": done, "terminated": done, "truncated": ~done}
    ordinal, how = episodes(done, ~done, done)
    p = algo_params.GRPOParams(**({"std_normalize": True, "gamma": 1.0} | params))
    return core.AdvantageInput(batch, p, lambda: (r, r, r[0]), ordinal, how, group_size)


def test_the_grouped_estimators_are_the_names_grpo_params_accept():
    import typing

    assert set(typing.get_args(algo_params.GroupEstimator)) <= set(core.ADVANTAGE_ESTIMATORS)


def test_rloo_is_each_score_against_the_mean_of_the_others():
    adv = core.ADVANTAGE_ESTIMATORS["rloo"](_one_step_responses([1.0, 0.0, 0.5, 2, 2, 2], 3))
    assert adv.adv[0].tolist() == pytest.approx([0.75, -0.75, 0.0, 0.0, 0.0, 0.0])


def test_reinforce_plus_plus_whitens_discounted_returns_over_the_batch():
    # two 3-token responses in two columns: scores 1 and 0 on their last tokens
    reward = np.array([[0, 0], [0, 0], [1, 0]], np.float32)
    done = np.array([[0, 0], [0, 0], [1, 1]], bool)
    valid = np.ones_like(done)
    ordinal, how = episodes(done, np.zeros_like(done), valid)
    p = algo_params.GRPOParams(gamma=0.5, std_normalize=True)
    batch = {"reward": reward, "valid": valid, "terminated": done,
             "truncated": np.zeros_like(done)}
    out = core.ADVANTAGE_ESTIMATORS["reinforce_plus_plus"](
        core.AdvantageInput(batch, p, lambda: (reward,) * 3, ordinal, how, 1))
    ret = np.array([[0.25, 0], [0.5, 0], [1.0, 0]])
    np.testing.assert_allclose(out.ret, ret, atol=1e-6)
    np.testing.assert_allclose(out.adv, (ret - ret.mean()) / math.sqrt(ret.var() + 1e-8),
                               atol=1e-5)


def test_the_four_verl_aggregations_by_hand():
    per_step = torch.tensor([1.0, 2.0, 3.0, 10.0])
    mb = {"seq": torch.tensor([0, 0, 0, 1]), "column": torch.tensor([0, 0, 0, 1])}
    agg = core.AGGREGATIONS
    assert float(agg["token-mean"](per_step, mb, 4.0)) == 4.0
    assert float(agg["seq-mean-token-sum"](per_step, mb, 4.0)) == 8.0
    assert float(agg["seq-mean-token-mean"](per_step, mb, 4.0)) == 6.0
    assert float(agg["seq-mean-token-sum-norm"](per_step, mb, 4.0)) == 2.0


def test_dual_clip_bounds_a_negative_advantages_loss():
    old = torch.zeros(3)
    new = torch.tensor([2.0, 2.0, 0.1])  # ratios e^2, e^2, e^0.1
    adv = torch.tensor([-1.0, 1.0, -1.0])
    plain, _ = core.clipped_surrogate(new, old, adv, 0.2, 0.28)
    dual, ratio = core.clipped_surrogate(new, old, adv, 0.2, 0.28, 3.0)
    assert float(plain[0]) == pytest.approx(math.exp(2))  # unbounded without dual clip
    assert float(dual[0]) == pytest.approx(3.0)  # -clip_c x A
    assert float(dual[1]) == pytest.approx(-1.28)  # a positive advantage: as before
    assert float(dual[2]) == pytest.approx(float(plain[2]))
    assert float(ratio[0]) == pytest.approx(math.exp(2))


def test_kl_estimators_k2_abs_and_k3_clamped():
    logp, ref = torch.tensor([0.0, -1.0]), torch.tensor([15.0, -1.5])
    kl = core.KL_ESTIMATORS
    assert kl["k2"](logp, ref).tolist() == pytest.approx([112.5, 0.125])
    assert kl["mse"] is kl["k2"] and kl["low_var_kl"] is kl["k3"] and kl["kl"] is kl["k1"]
    assert kl["abs"](logp, ref).tolist() == pytest.approx([15.0, 0.5])
    k3 = kl["k3"](logp, ref).tolist()
    assert k3[0] == 10.0  # e^15 - 16, clamped as verl clamps it
    assert k3[1] == pytest.approx(math.exp(-0.5) + 0.5 - 1)


def test_the_adaptive_kl_coefficient_moves_towards_its_target():
    fixed = core.KLController(0.1)
    fixed.update(5.0, 1000)
    assert fixed.value == 0.1
    ctl = core.KLController(0.1, "adaptive", target=0.1, horizon=100)
    ctl.update(0.3, 50)  # error clipped to +0.2: x (1 + 0.2 x 50 / 100)
    assert ctl.value == pytest.approx(0.11)
    ctl.update(0.0, 50)
    assert ctl.value == pytest.approx(0.11 * 0.9)


def test_the_overlong_penalty_falls_linearly_over_its_buffer():
    pen = grouped.overlong_penalty(np.array([3, 5, 7, 9]), max_response=9, buffer=4, factor=1.0)
    assert pen.tolist() == pytest.approx([0.0, 0.0, -0.5, -1.0])
    assert not grouped.overlong_penalty(np.array([9]), 9, 0, 1.0).any()  # off


def _grpo(*sets):
    from verl_zmq.algos import make_algorithm
    from verl_zmq.envs.make import env_spec

    job = load_job(JOB, ["sampling.num_envs_per_worker=16", "environment.kwargs={group_size=8}",
                         *sets])
    torch.manual_seed(0)
    return make_algorithm(job, env_spec(job.environment)), job


def _fragment(job, algo):
    from verl_zmq.envs.make import make_vector_env
    from verl_zmq.sampling.collector import EnvCollector

    venv, seeds = make_vector_env(job.environment, 16, 0)
    return EnvCollector(job, algo, venv, seeds).collect()[0]


def test_filter_groups_marks_out_groups_without_signal_and_counts_the_rest():
    from verl_zmq.batch import steps

    algo, job = _grpo("algorithm.params.filter_groups=true")
    assert job.traits.filters_fragments
    frag = dict(_fragment(job, algo))
    ended = (frag["terminated"] | frag["truncated"]) & frag["valid"]
    # the second group's (columns 8-15) responses all score 1: no signal
    reward = np.array(frag["reward"], np.float32)
    reward[:, 8:] = np.where(ended[:, 8:], 1.0, 0.0)
    reward[:, :8] = np.where(ended[:, :8], np.arange(8) / 8, 0.0)
    frag["reward"] = reward
    kept, n = algo.fragment_filter()(frag)
    assert n == steps(frag) // 2
    _, how = episodes(kept["terminated"], kept["truncated"], kept["valid"])
    assert (how[:8, 0] == 1).all() and (how[8:, 0] == 2).all()  # one response each
    out = algo.learn(kept).metrics
    assert out["grpo/responses"] == 8 and out["grpo/filtered_groups"] == 1
    frag["reward"] = np.where(ended, 1.0, 0.0).astype(np.float32)  # no group has signal
    assert algo.fragment_filter()(frag) is None


@pytest.mark.parametrize("sets", [
    ["algorithm.params.adv_estimator='rloo'", "algorithm.params.loss_agg='seq-mean-token-mean'"],
    ["algorithm.params.adv_estimator='reinforce_plus_plus'", "algorithm.params.kl_in='reward'",
     "algorithm.params.kl_estimator='k2'"],
    ["algorithm.params.adv_estimator='reinforce_plus_plus_baseline'",
     "algorithm.params.loss_agg='seq-mean-token-sum-norm'", "algorithm.params.clip_ratio_c=3.0",
     "algorithm.params.kl_ctrl='adaptive'", "algorithm.params.overlong_buffer_len=4"],
])
def test_each_option_runs_an_update_with_verls_metrics(sets, tmp_path):
    from verl_zmq.checkpoint import load, save_atomic

    algo, job = _grpo(*sets)
    out = algo.learn(_fragment(job, algo)).metrics
    for k in ("critic/score/mean", "response_length/mean", "response_length/clip_ratio",
              "actor/pg_clipfrac", "actor/ppo_kl", "actor/kl_coef"):
        assert k in out and math.isfinite(out[k]), k
    if job.algorithm.params.kl_ctrl == "adaptive":  # the coefficient moved and is kept
        assert algo.kl_ctl.value != job.algorithm.params.kl_coef
        save_atomic(algo.state_dict(), tmp_path / "s.pt")
        again, _ = _grpo(*sets)
        again.load_state_dict(load(tmp_path / "s.pt"))
        assert again.kl_ctl.value == algo.kl_ctl.value
