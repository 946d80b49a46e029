"""The learner's warning for a critic that answers one constant (critic_watch)."""

import numpy as np
import torch

from verl_zmq.learning.critic_watch import CriticWatch


def _feed(watch, spreads):
    return [watch.check({"losses/value_spread": s, "losses/explained_variance": 0.0})
            for s in spreads]


def test_warns_once_after_patience_flat_updates_past_the_grace():
    w = CriticWatch(grace=2, patience=3)
    out = _feed(w, [0.0, 0.0, 0.001, 0.002, 0.0, 0.0, 0.0])
    fired = [i for i, o in enumerate(out) if o is not None]
    assert fired == [4]  # updates 3, 4, 5 are flat after a grace of 2
    assert "normalize_reward" in out[4]["hint"]


def test_a_critic_that_varies_resets_the_count_and_no_critic_is_silent():
    w = CriticWatch(grace=0, patience=3)
    assert all(o is None for o in _feed(w, [0.0, 0.0, 0.5, 0.0, 0.0, 0.3] * 3))
    assert w.check({"losses/policy_loss": 1.0}) is None and w.seen == 18
    scaled = CriticWatch(rewards_scaled=True, grace=0, patience=1)
    assert "scaled already" in _feed(scaled, [0.0])[0]["hint"]


def test_ppo_reports_the_spread_of_its_critic():
    """A PPO update's value_spread: 0 for values that are one constant, clearly
    above 0 for values that vary with the returns."""
    from verl_zmq.algos.ppo import PPO
    from verl_zmq.config import load_job
    from verl_zmq.envs.make import EnvSpec
    from verl_zmq.wire.samples import cartpole_fragment

    torch.manual_seed(0)
    job = load_job("configs/cartpole_ppo.toml", ["algorithm.params.n_epochs=1"])
    algo = PPO(job, EnvSpec((4,), True, 2, ()))
    batch = cartpole_fragment(32, 4)
    rng = np.random.default_rng(0)
    batch["reward"] = rng.normal(size=batch["reward"].shape).astype(np.float32)
    const = {**batch, "value": np.full_like(batch["value"], 3.0)}
    flat = algo.learn(const).metrics["losses/value_spread"]
    varied = algo.learn({**batch, "value": batch["reward"] * 3}).metrics["losses/value_spread"]
    assert flat == 0.0 and varied > 0.5


def test_small_unscaled_targets_leave_a_constant_as_the_best_critic():
    """A solved task's noise or a game before its first rewards: a flat critic is
    right there, and only large targets (or scaled rewards) are counted."""
    small = [{"losses/value_spread": 0.0, "losses/value_target_scale": 3.0}] * 20
    assert all(w is None for w in map(CriticWatch(grace=0, patience=3).check, small))
    scaled = CriticWatch(rewards_scaled=True, grace=0, patience=3)
    assert [w is not None for w in map(scaled.check, small[:3])] == [False, False, True]
    large = [{"losses/value_spread": 0.0, "losses/value_target_scale": 40.0}] * 3
    assert CriticWatch(grace=0, patience=3).check(large[0]) is None
    w = CriticWatch(grace=0, patience=3)
    assert [w.check(m) is not None for m in large] == [False, False, True]
