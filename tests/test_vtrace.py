"""V-trace targets and advantages against hand computation; on-policy they are
GAE's; PPO with V-trace on fresh data is PPO."""

from __future__ import annotations

import numpy as np
import pytest

from verl_zmq.algos.ppo import compute_gae
from verl_zmq.algos.vtrace import vtrace


def _col(*x):
    return np.array(x, np.float32)[:, None]


def test_vtrace_by_hand_off_policy():
    # V = (1, 2, 0.5), V(bootstrap) = 1.5, r = (1, 0, 2), gamma 0.9, pi/mu = (2, 0.5, 1):
    # rho = c = (1, 0.5, 1) with both bars at 1
    V, r = _col(1.0, 2.0, 0.5), _col(1.0, 0.0, 2.0)
    no = np.zeros((3, 1), bool)
    adv, vs = vtrace(r, V, no, no, ~no, np.array([1.5], np.float32),
                     np.log(_col(2.0, 0.5, 1.0)), gamma=0.9, lam=1.0)
    # deltas: 1.8, 0.5 * (0.45 - 2) = -0.775, 2 + 1.35 - 0.5 = 2.85
    # v2 = 0.5 + 2.85; v1 = 2 - 0.775 + 0.9 * 0.5 * 2.85; v0 = 1 + 1.8 + 0.9 * -0.775
    #   + 0.81 * 0.5 * 2.85
    np.testing.assert_allclose(vs[:, 0], [3.25675, 2.5075, 3.35], rtol=1e-5)
    # A_s = rho_s (r_s + gamma v_{s+1} - V_s)
    np.testing.assert_allclose(adv[:, 0], [1 + 0.9 * 2.5075 - 1, 0.5 * (0.9 * 3.35 - 2),
                                           2 + 0.9 * 1.5 - 0.5], rtol=1e-5)


def test_vtrace_by_hand_with_an_episode_end_inside_the_fragment():
    # step 0 terminates, step 1 only resets the env (invalid), step 2 starts anew
    V, r = _col(1.0, 7.0, 0.5), _col(1.0, 0.0, 2.0)
    term = np.array([[True], [False], [False]])
    valid = np.array([[True], [False], [True]])
    no = np.zeros((3, 1), bool)
    adv, vs = vtrace(r, V, term, no, valid, np.array([1.5], np.float32),
                     np.log(_col(3.0, 1.0, 0.25)), gamma=0.9, lam=1.0, rho_bar=2.0)
    # step 0: rho = min(2, 3) = 2, no bootstrap past a terminal: v0 = 1 + 2 (1 - 1)
    assert vs[0, 0] == pytest.approx(1.0) and adv[0, 0] == pytest.approx(0.0)
    assert vs[1, 0] == pytest.approx(7.0) and adv[1, 0] == 0.0  # invalid: untouched
    # step 2: rho = 0.25, bootstraps from 1.5
    d2 = 0.25 * (2 + 0.9 * 1.5 - 0.5)
    assert vs[2, 0] == pytest.approx(0.5 + d2) and adv[2, 0] == pytest.approx(d2)
    # truncated instead: bootstraps from V(final observation), the invalid step's value
    adv, vs = vtrace(r, V, no, term, valid, np.array([1.5], np.float32),
                     np.zeros((3, 1), np.float32), gamma=0.9, lam=1.0)
    assert vs[0, 0] == pytest.approx(1 + 0.9 * 7.0) and adv[0, 0] == pytest.approx(0.9 * 7.0)


@pytest.mark.parametrize("lam", [1.0, 0.95, 0.0])
def test_on_policy_vtrace_is_gae(lam):
    rng = np.random.default_rng(0)
    T, E = 64, 6
    reward = rng.standard_normal((T, E)).astype(np.float32)
    value = rng.standard_normal((T, E)).astype(np.float32)
    term = rng.random((T, E)) < 0.05
    trunc = (rng.random((T, E)) < 0.05) & ~term
    valid = np.ones((T, E), bool)
    valid[1:] = ~(term | trunc)[:-1]  # NEXT_STEP: the step after a done step resets
    term &= valid
    trunc &= valid
    boot = rng.standard_normal(E).astype(np.float32)
    gae_adv, gae_ret = compute_gae(reward, value, term, trunc, valid, boot, 0.97, lam)
    adv, vs = vtrace(reward, value, term, trunc, valid, boot, np.zeros((T, E), np.float32),
                     0.97, lam)
    np.testing.assert_allclose(vs[valid], gae_ret[valid], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(adv, gae_adv, rtol=1e-4, atol=1e-5)


def test_importance_weights_are_truncated():
    V, r = _col(0.0), _col(1.0)
    no = np.zeros((1, 1), bool)
    for ratio, bar, want in [(10.0, 1.0, 1.0), (10.0, 2.0, 2.0), (0.1, 1.0, 0.1)]:
        adv, vs = vtrace(r, V, no, no, ~no, np.zeros(1, np.float32), np.log(_col(ratio)),
                         gamma=0.9, rho_bar=bar)
        assert vs[0, 0] == pytest.approx(want) and adv[0, 0] == pytest.approx(want)


def test_ppo_with_vtrace_on_fresh_data_equals_ppo():
    from verl_zmq.algos.core import AdvantageInput, vtrace_advantages
    from verl_zmq.algos.ppo import PPO
    from verl_zmq.config import load_job
    from verl_zmq.envs.make import EnvSpec
    from verl_zmq.wire.samples import cartpole_fragment

    job = load_job("configs/cartpole_ppo.toml", ["algorithm.params.vtrace=true"])
    algo = PPO(job, EnvSpec((4,), True, 2, ()))
    batch = cartpole_fragment(16, 4)
    # record what the sampler would have: this network's log-probabilities and values
    logp, value, boot = algo._now(batch)
    batch.update(logp=logp, value=value, bootstrap_value=boot)
    est = vtrace_advantages(AdvantageInput(batch, algo.params, lambda: (logp, value, boot),
                                           np.zeros((16, 4), int), np.zeros((4, 1), int)))
    adv, ret = est.adv, est.ret
    g_adv, g_ret = compute_gae(batch["reward"], value, batch["terminated"], batch["truncated"],
                               batch["valid"], boot, 0.99, job.algorithm.params.gae_lambda)
    np.testing.assert_allclose(adv, g_adv, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ret[batch["valid"]], g_ret[batch["valid"]], rtol=1e-4, atol=1e-5)
