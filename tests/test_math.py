"""The maths, against hand-computed values: GAE with terminations and
truncations, the PPO clipped loss, the observation normaliser's merge."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from verl_zmq.algos.ppo import clipped_surrogate, compute_gae
from verl_zmq.normalize import RunningMeanStd, discounted_returns, scale_rewards


def _col(*xs, dtype=np.float32):
    return np.array(xs, dtype=dtype).reshape(-1, 1)


def test_gae_plain_rollout_bootstraps_at_the_end():
    g, lam = 0.9, 0.5
    r, v = _col(1, 2), _col(0.5, 1.0)
    adv, ret = compute_gae(r, v, _col(0, 0, dtype=bool), _col(0, 0, dtype=bool),
                           _col(1, 1, dtype=bool), np.array([2.0], np.float32), g, lam)
    d1 = 2 + g * 2.0 - 1.0            # 2.8
    d0 = 1 + g * 1.0 - 0.5            # 1.4
    assert adv[1, 0] == pytest.approx(d1)
    assert adv[0, 0] == pytest.approx(d0 + g * lam * d1)   # 1.4 + 0.45 * 2.8 = 2.66
    assert ret[0, 0] == pytest.approx(2.66 + 0.5)


def test_gae_termination_does_not_bootstrap_truncation_does():
    g, lam = 0.9, 0.5
    # t0 ends the episode; t1 is the reset step (invalid): its value is V(final obs) = 10
    r, v = _col(1, 0, 3), _col(0.5, 10.0, 1.0)
    valid = _col(1, 0, 1, dtype=bool)
    boot = np.array([4.0], np.float32)
    zero = _col(0, 0, 0, dtype=bool)
    term = _col(1, 0, 0, dtype=bool)
    adv_t, _ = compute_gae(r, v, term, zero, valid, boot, g, lam)
    assert adv_t[0, 0] == pytest.approx(1 - 0.5)            # no bootstrap, no carry
    assert adv_t[1, 0] == 0.0                                # invalid step
    assert adv_t[2, 0] == pytest.approx(3 + g * 4.0 - 1.0)   # next episode bootstraps
    trunc = _col(1, 0, 0, dtype=bool)
    adv_tr, _ = compute_gae(r, v, zero, trunc, valid, boot, g, lam)
    assert adv_tr[0, 0] == pytest.approx(1 + g * 10.0 - 0.5)  # bootstraps V(final obs), no carry
    assert adv_tr[2, 0] == pytest.approx(adv_t[2, 0])


def test_gae_columns_are_independent():
    T, E = 5, 3
    rng = np.random.default_rng(0)
    r = rng.standard_normal((T, E)).astype(np.float32)
    v = rng.standard_normal((T, E)).astype(np.float32)
    f = np.zeros((T, E), bool)
    ones = np.ones((T, E), bool)
    boot = rng.standard_normal(E).astype(np.float32)
    adv, _ = compute_gae(r, v, f, f, ones, boot, 0.99, 0.95)
    for e in range(E):
        a1, _ = compute_gae(r[:, e:e + 1], v[:, e:e + 1], f[:, :1], f[:, :1], ones[:, :1],
                            boot[e:e + 1], 0.99, 0.95)
        np.testing.assert_allclose(adv[:, e:e + 1], a1, rtol=1e-6)


def test_clipped_surrogate_by_hand():
    old = torch.zeros(4)
    new = torch.log(torch.tensor([1.5, 0.5, 1.1, 0.7]))
    adv = torch.tensor([1.0, 1.0, -2.0, -2.0])
    loss, ratio = clipped_surrogate(new, old, adv, 0.2, 0.2)
    # positive advantage: min(r*A, clip(r)*A); negative: the pessimistic (larger) loss
    expected = [-1.2, -0.5, 2.2, 1.6]
    np.testing.assert_allclose(loss.numpy(), expected, rtol=1e-6)
    np.testing.assert_allclose(ratio.numpy(), [1.5, 0.5, 1.1, 0.7], rtol=1e-6)


def test_clipped_surrogate_gradient_vanishes_outside_the_clip():
    new = torch.log(torch.tensor([1.5, 1.1])).requires_grad_()
    loss, _ = clipped_surrogate(new, torch.zeros(2), torch.tensor([1.0, 1.0]), 0.2, 0.2)
    loss.sum().backward()
    assert new.grad[0] == 0.0 and new.grad[1] == pytest.approx(-1.1)


def test_ppo_loss_matches_a_hand_computation(tmp_path):
    from verl_zmq.algos.ppo import PPO
    from verl_zmq.config import load_job
    from verl_zmq.envs.make import EnvSpec

    job = load_job("configs/cartpole_ppo.toml", ["algorithm.params.ent_coef=0.1",
                                                  "algorithm.params.normalize_advantage=false"])
    algo = PPO(job, EnvSpec((4,), True, 2, ()))
    obs = torch.randn(6, 4)
    action = torch.tensor([0, 1, 0, 1, 1, 0])
    with torch.no_grad():
        d = algo.net.dist(obs)
        logp = algo.net.log_prob(d, action)
        value = algo.net.value(obs)
    mb = {"obs": obs, "action": action, "logp": logp - 0.3, "value": value,
          "adv": torch.linspace(-1, 1, 6), "ret": value + 1.0}
    loss, stats = algo.loss(mb)
    ratio = torch.exp(torch.tensor(0.3))
    pg = torch.max(-mb["adv"] * ratio, -mb["adv"] * torch.clamp(ratio, 0.8, 1.2)).mean()
    ent = d.entropy().mean()
    expected = pg + 0.5 * 0.5 * 1.0 - 0.1 * ent
    assert float(loss.detach()) == pytest.approx(float(expected), rel=1e-5)
    assert float(stats["losses/clip_fraction"]) == 1.0


def test_normaliser_merge_equals_one_pass():
    rng = np.random.default_rng(1)
    a = rng.normal(3, 2, (100, 3))
    b = rng.normal(-1, 0.5, (37, 3))
    rms = RunningMeanStd((3,))
    rms.update(a)
    rms.merge(b.mean(0), b.var(0), len(b))
    both = np.concatenate([a, b])
    np.testing.assert_allclose(rms.mean, both.mean(0), rtol=1e-10)
    np.testing.assert_allclose(rms.var, both.var(0), rtol=1e-10)
    assert rms.count == 137
    # by hand, one dimension: {1, 3} merged with {5}: mean 3, var 8/3
    r = RunningMeanStd((1,))
    r.update(np.array([[1.0], [3.0]]))
    r.merge(np.array([5.0]), np.array([0.0]), 1)
    assert r.mean[0] == pytest.approx(3.0) and r.var[0] == pytest.approx(8 / 3)
    z = r.normalize(np.array([[3.0 + np.sqrt(8 / 3)]]), clip=10)
    assert z[0, 0] == pytest.approx(1.0, rel=1e-6)


def test_normaliser_stats_travel_as_arrays():
    r = RunningMeanStd((2,))
    r.update(np.array([[1.0, 2.0], [3.0, 6.0]]))
    other = RunningMeanStd((2,))
    assert other.load_arrays(r.to_arrays())
    np.testing.assert_allclose(other.mean, [2.0, 4.0])
    assert not other.load_arrays({"obs_rms/mean": np.zeros(3)})


def test_discounted_returns_restart_after_an_episode_end():
    r = np.array([[1.0, 2.0], [1.0, 2.0], [1.0, 2.0]])
    done = np.array([[False, False], [True, False], [False, False]])
    out = discounted_returns(r, done, 0.5)
    # column 0: 1, 1 + 0.5, then a new episode; column 1: 2, 3, 3.5
    assert np.allclose(out[:, 0], [1.0, 1.5, 1.0]) and np.allclose(out[:, 1], [2.0, 3.0, 3.5])


def test_rewards_are_scaled_by_the_running_std_of_returns():
    rng = np.random.default_rng(0)
    rms = RunningMeanStd(())
    for _ in range(20):
        T, N = 64, 4
        batch = {"reward": rng.normal(5.0, 3.0, (T, N)).astype(np.float32),
                 "terminated": rng.random((T, N)) < 0.05, "truncated": np.zeros((T, N), bool),
                 "valid": np.ones((T, N), bool)}
        out = scale_rewards(batch, rms, 0.99, 10.0)
    assert out["reward"].dtype == np.float32 and out["reward"] is not batch["reward"]
    assert np.allclose(out["reward"], np.clip(batch["reward"] / np.sqrt(rms.var + 1e-8), -10, 10))
    assert rms.count == 20 * 64 * 4 and np.sqrt(rms.var) > 3.0  # returns vary more than rewards


def test_double_dqn_target_by_hand():
    from verl_zmq.algos.dqn import double_dqn_target

    q_online = torch.tensor([[1.0, 3.0], [5.0, 2.0]])   # argmax: action 1, action 0
    q_target = torch.tensor([[10.0, 20.0], [30.0, 40.0]])
    y = double_dqn_target(q_online, q_target, torch.tensor([1.0, 2.0]),
                          torch.tensor([0.9, 0.0]))
    # the online net picks the action, the target net values it; discount 0 = terminated
    assert y.tolist() == pytest.approx([1.0 + 0.9 * 20.0, 2.0])


def test_dqn_learns_a_one_step_target_and_reports_priorities():
    from verl_zmq.algos.dqn import DQN
    from verl_zmq.config import load_job
    from verl_zmq.envs.make import EnvSpec

    job = load_job("configs/cartpole_dqn.toml", ["algorithm.params.learning_rate=0.01",
                                                  "algorithm.policy.dueling=false"])
    algo = DQN(job, EnvSpec((4,), True, 2, ()))
    rng = np.random.default_rng(0)
    batch = {"obs": rng.standard_normal((64, 4)).astype(np.float32),
             "action": rng.integers(0, 2, 64), "reward": np.ones(64, np.float32),
             "next_obs": np.zeros((64, 4), np.float32), "discount": np.zeros(64, np.float32),
             "weight": np.ones(64, np.float32)}
    first = algo.learn(batch).metrics["losses/td_loss"]
    for _ in range(200):
        last = algo.learn(batch)
    assert last.metrics["losses/td_loss"] < 0.1 * first
    assert last.priorities.shape == (64,) and (last.priorities >= 0).all()


def test_dqn_learning_rate_decays_linearly_to_zero_at_the_budget():
    from verl_zmq.algos.base import Progress
    from verl_zmq.algos.dqn import DQN
    from verl_zmq.config import load_job
    from verl_zmq.envs.make import EnvSpec

    job = load_job("configs/cartpole_dqn.toml", ['algorithm.params.lr_schedule="linear"',
                                                  "algorithm.params.learning_rate=0.002"])
    algo = DQN(job, EnvSpec((4,), True, 2, ()))
    batch = {"obs": np.ones((8, 4), np.float32), "action": np.zeros(8, np.int64),
             "reward": np.ones(8, np.float32), "next_obs": np.zeros((8, 4), np.float32),
             "discount": np.zeros(8, np.float32), "weight": np.ones(8, np.float32)}
    for frac, lr in ((0.0, 0.002), (0.25, 0.0015), (1.0, 0.0)):
        out = algo.learn(batch, Progress(env_steps=int(frac * 50_000), fraction=frac))
        assert out.metrics["charts/learning_rate"] == pytest.approx(lr)
        assert algo.opt.param_groups[0]["lr"] == pytest.approx(lr)
    before = [p.detach().clone() for p in algo.q.parameters()]
    algo.learn(batch, Progress(env_steps=50_000, fraction=1.0))  # at the budget: no step
    assert all(torch.equal(a, b) for a, b in zip(before, algo.q.parameters()))


def test_apex_epsilons():
    from verl_zmq.algos.dqn import DQN
    from verl_zmq.config import load_job
    from verl_zmq.envs.make import EnvSpec

    job = load_job("configs/cartpole_dqn.toml", ['algorithm.params.exploration="apex"'])
    after = job.algorithm.params.learning_starts  # before: uniform random actions
    eps = [DQN(job, EnvSpec((4,), True, 2, ()), worker=(i, 8)).epsilon(after)
           for i in range(8)]
    assert eps[0] == pytest.approx(0.4) and eps[-1] == pytest.approx(0.4 ** 8)
    assert eps == sorted(eps, reverse=True)
    assert DQN(job, EnvSpec((4,), True, 2, ())).epsilon(after) == pytest.approx(0.4)
    assert DQN(job, EnvSpec((4,), True, 2, ())).epsilon(after - 1) == 1.0
