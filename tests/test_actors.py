"""The samplers' numpy policies against the torch algorithms they stand for:
same params arrays, same deterministic actions, log-probabilities, values and
Q-values; sampled actions carry their own log-probabilities."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.conftest import CONFIGS
from verl_zmq.algos import make_algorithm
from verl_zmq.config import load_job
from verl_zmq.envs.make import env_spec
from verl_zmq.policy.numpy_actor import NumpyActor, make_actor

CASES = {
    "ppo-discrete": ("cartpole_ppo.toml", []),
    "ppo-gaussian": ("cartpole_ppo.toml", ['environment.id="Pendulum-v1"',
                                           "algorithm.policy.log_std_init=-0.5"]),
    "dapo": ("cartpole_dapo.toml", []),
    "dqn": ("cartpole_dqn.toml", ["algorithm.policy.dueling=false"]),
    "dqn-dueling": ("cartpole_dqn.toml", ["algorithm.policy.dueling=true"]),
    "sac": ("pendulum_sac.toml", []),
}


def _pair(name):
    job_file, over = CASES[name]
    job = load_job(CONFIGS / job_file, over)
    spec = env_spec(job.environment)
    torch.manual_seed(3)
    algo = make_algorithm(job, spec)
    with torch.no_grad():  # not the init: biases and log_std away from zero too
        for p in algo.policy_module().parameters():
            p.add_(0.1 * torch.randn_like(p))
    actor = NumpyActor(job, spec)
    actor.load_policy_arrays(algo.policy_arrays())
    obs = np.random.default_rng(0).standard_normal((64, *spec.obs_shape)).astype(np.float32)
    return job, spec, algo, actor, obs


@pytest.mark.parametrize("name", sorted(CASES))
def test_numpy_and_torch_policies_agree(name):
    job, spec, algo, actor, obs = _pair(name)
    a_np, ex_np = actor.act(obs, deterministic=True, env_steps=10**9)
    a_t, ex_t = algo.act(obs, deterministic=True, env_steps=10**9)
    np.testing.assert_allclose(a_np, a_t, rtol=1e-4, atol=1e-5)
    assert set(ex_np) == set(ex_t) == set(job.traits.extras)
    for k in ex_t:
        np.testing.assert_allclose(ex_np[k], ex_t[k], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(actor.env_action(a_np), algo.env_action(a_t), rtol=1e-4,
                               atol=1e-5)


@pytest.mark.parametrize("name", sorted(CASES))
def test_numpy_samplers_start_from_the_learners_initial_weights(name):
    """Version 0 is one policy everywhere: a numpy sampler makes the arrays the
    learner's torch modules were given, whatever torch's own seed was."""
    job_file, over = CASES[name]
    job = load_job(CONFIGS / job_file, over)
    spec = env_spec(job.environment)
    torch.manual_seed(123)
    learner = make_algorithm(job, spec).policy_arrays()
    actor = NumpyActor(job, spec, (2, 4), acting_seed=99)
    assert set(actor.arrays) == set(learner)
    for k, v in learner.items():
        np.testing.assert_array_equal(actor.arrays[k], v, err_msg=k)
    other = NumpyActor(load_job(CONFIGS / job_file, [*over, "experiment.seed=7"]), spec)
    assert any(not np.array_equal(other.arrays[k], v) for k, v in learner.items())


def test_orthogonal_init_is_torchs():
    from verl_zmq.policy.initial import orthogonal

    rng = np.random.default_rng(0)
    for rows, cols, gain in ((64, 4, 2 ** 0.5), (2, 64, 0.01), (64, 64, 1.0)):
        w = orthogonal(rng, rows, cols, gain).astype(np.float64)
        small = min(rows, cols)
        gram = w @ w.T if rows <= cols else w.T @ w  # orthonormal rows or columns, scaled
        np.testing.assert_allclose(gram, gain ** 2 * np.eye(small), atol=1e-5)
        t = torch.empty(rows, cols)
        torch.nn.init.orthogonal_(t, gain)  # the same norms as torch's draw
        assert abs(np.linalg.norm(w) - t.norm().item()) < 1e-4


@pytest.mark.parametrize("name", ["ppo-discrete", "ppo-gaussian", "dapo"])
def test_sampled_actions_carry_their_torch_log_probabilities(name):
    _, spec, algo, actor, obs = _pair(name)
    a, ex = actor.act(obs)
    with torch.no_grad():
        d = algo.net.dist(torch.as_tensor(obs))
        want = algo.net.log_prob(d, torch.as_tensor(a)).numpy()
    np.testing.assert_allclose(ex["logp"], want, rtol=1e-4, atol=1e-4)
    if spec.discrete:  # both actions drawn, with about the policy's frequencies
        big = np.repeat(obs[:1], 4000, axis=0)
        p1 = torch.softmax(algo.net.pi(torch.as_tensor(obs[:1])), -1)[0, 1].item()
        assert abs((actor.act(big)[0] == 1).mean() - p1) < 0.05


def test_dqn_actor_explores_and_records_apex_priorities():
    job, spec, algo, actor, obs = _pair("dqn")
    assert actor.epsilon(0) == algo.epsilon(0) and actor.epsilon(10**9) == algo.epsilon(10**9)
    T, E = 8, 2
    frag = {"reward": np.ones((T, E), np.float32), "terminated": np.zeros((T, E), bool),
            "truncated": np.zeros((T, E), bool), "valid": np.ones((T, E), bool),
            "q_taken": np.full((T, E), 2.0, np.float32), "q_max": np.full((T, E), 3.0, np.float32),
            "bootstrap_q_max": np.full(E, 3.0, np.float32),
            "bootstrap_q_taken": np.zeros(E, np.float32)}
    np.testing.assert_allclose(actor.finish_fragment(frag)["priority"],
                               algo.finish_fragment(frag)["priority"])


def test_the_job_chooses_numpy_or_torch():
    job = load_job(CONFIGS / "cartpole_ppo.toml")
    spec = env_spec(job.environment)
    assert isinstance(make_actor(job, spec, (0, 1), (1, 2)), NumpyActor)
    job = load_job(CONFIGS / "cartpole_ppo.toml", ['sampling.inference="torch"'])
    assert not isinstance(make_actor(job, spec, (0, 1), (1, 2)), NumpyActor)


def test_params_that_do_not_fit_are_refused():
    _, _, _, actor, _ = _pair("ppo-discrete")
    with pytest.raises(ValueError):
        actor.load_policy_arrays({"pi.0.weight": np.zeros((64, 7), np.float32)})


@pytest.mark.parametrize("beta", [0.0, 1.0, 2.0])
def test_action_noise_is_unit_gaussian_and_as_correlated_as_its_spectrum(beta):
    from verl_zmq.algos.exploration import ActionNoise

    noise = ActionNoise(beta, 500, np.random.default_rng(0))
    x = np.stack([noise((400, 2)) for _ in range(1000)])  # [steps, envs, actions]
    assert x.shape == (1000, 400, 2)
    assert abs(x.var() - 1) < 0.05 and abs(x.mean()) < 0.05
    lag1 = np.mean(x[1:] * x[:-1])  # within blocks; each block starts afresh
    want = {0.0: (-0.02, 0.02), 1.0: (0.6, 0.85), 2.0: (0.9, 1.1)}[beta]
    assert want[0] < lag1 < want[1]
    # envs draw apart (compared by their steps: two random walks correlate by chance)
    envs = np.corrcoef(np.diff(x[:, 0, 0]), np.diff(x[:, 1, 0]))[0, 1]
    assert abs(envs) < 0.3
    if beta == 0:  # white: exactly the generator's normal draws, as before
        rng = np.random.default_rng(0)
        np.testing.assert_array_equal(ActionNoise(0.0, 500, np.random.default_rng(0))((3, 2)),
                                      rng.standard_normal((3, 2)))


def test_sac_acts_with_pink_noise_in_numpy_and_torch_alike():
    job = load_job(CONFIGS / "mountaincar_sac.toml", ["algorithm.params.noise_beta=1.0"])
    spec = env_spec(job.environment)
    algo = make_algorithm(job, spec, acting_seed=5)
    actor = NumpyActor(job, spec, acting_seed=5)
    actor.load_policy_arrays(algo.policy_arrays())
    obs = np.random.default_rng(0).standard_normal((8, *spec.obs_shape)).astype(np.float32)
    steps = [(actor.act(obs, env_steps=10**9)[0], algo.act(obs, env_steps=10**9)[0])
             for _ in range(50)]
    for a_np, a_t in steps:  # the same noise sequence drawn on both sides
        np.testing.assert_allclose(a_np, a_t, rtol=1e-4, atol=1e-5)
    first = np.stack([s[0] for s in steps])[:, :, 0]
    assert np.mean(np.sign(first[1:]) == np.sign(first[:-1])) > 0.7  # it persists


@pytest.mark.parametrize("beta", [0.0, 1.0])
def test_sac_warmup_travels_with_coloured_noise_and_is_uniform_with_white(beta):
    job = load_job(CONFIGS / "mountaincar_sac.toml", [f"algorithm.params.noise_beta={beta}"])
    spec = env_spec(job.environment)
    algo = make_algorithm(job, spec, acting_seed=5)
    actor = NumpyActor(job, spec, acting_seed=5)
    obs = np.zeros((4, *spec.obs_shape), np.float32)
    steps = [(actor.act(obs, env_steps=0)[0], algo.act(obs, env_steps=0)[0]) for _ in range(200)]
    for a_np, a_t in steps:
        np.testing.assert_array_equal(a_np, a_t)
    a = np.stack([s[0] for s in steps])[:, :, 0]  # [steps, envs]
    assert np.all(np.abs(a) <= 1.0)
    same_sign = np.mean(np.sign(a[1:]) == np.sign(a[:-1]))
    if beta == 0:  # the uniform draws of before
        first = np.random.default_rng(5).uniform(-1, 1, (4, 1)).astype(np.float32)
        np.testing.assert_array_equal(steps[0][0], first)
        assert 0.35 < same_sign < 0.65
    else:  # pushed one way for many steps: what climbs MountainCar's hill
        assert same_sign > 0.8


def test_noise_settings_out_of_range_are_refused():
    from verl_zmq.config import ConfigError

    with pytest.raises(ConfigError, match="noise_beta"):
        load_job(CONFIGS / "mountaincar_sac.toml", ["algorithm.params.noise_beta=5.0"])


@pytest.mark.parametrize("name", ["ppo-discrete", "sac"])
def test_published_arrays_are_a_snapshot_not_views_of_the_live_tensors(name):
    """What a learner publishes may wait in a socket's queue (and a late subscriber
    gets the last message again) while the next update changes the weights in
    place: the arrays must hold the version they are published under."""
    _, _, algo, _, _ = _pair(name)
    arrays = algo.policy_arrays()
    before = {k: v.copy() for k, v in arrays.items()}
    with torch.no_grad():
        for p in algo.policy_module().parameters():
            p.add_(1.0)
    assert all(np.array_equal(arrays[k], before[k]) for k in arrays)
