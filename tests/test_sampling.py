"""The sampler's stepping code without I/O: fragment layout, NEXT_STEP autoreset
marking, continuous actions, observation normalisation, custom rewards; and a
continuous-action job end to end in one process."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import CONFIGS, verl
from verl_zmq.algos import make_algorithm
from verl_zmq.batch import Layout
from verl_zmq.config import load_job
from verl_zmq.envs.make import env_seeds, env_spec, make_vector_env
from verl_zmq.sampling.collector import EnvCollector


def _collector(overrides):
    job = load_job(CONFIGS / "cartpole_ppo.toml", overrides)
    spec = env_spec(job.environment)
    algo = make_algorithm(job, spec)
    venv, seeds = make_vector_env(job.environment, job.sampling.num_envs_per_worker, 0, 1)
    return job, spec, algo, EnvCollector(job, algo, venv, seeds)


def test_cartpole_fragment_layout_and_autoreset_marking():
    job, spec, algo, col = _collector(["sampling.fragment_length=200",
                                       "replay.capacity=1000"])
    a, version = col.collect()
    assert version == 0
    T = 200
    assert Layout(spec, T, algo.extras).problem(a) == ""
    done = a["terminated"] | a["truncated"]
    # the step after a done step only resets the env: invalid, reward 0
    t, e = np.argwhere(done[:-1])[0]
    assert not a["valid"][t + 1, e] and a["reward"][t + 1, e] == 0.0
    assert len(a["ep_return"]) == int(done.sum())
    np.testing.assert_allclose(a["ep_return"], a["ep_length"])  # CartPole pays 1 per step


def test_continuous_actions_normalisation_and_reward_fn():
    job, spec, algo, col = _collector([
        'environment.id="Pendulum-v1"', "environment.normalize_obs=true",
        'environment.reward_fn="tests.envs:double_reward"', "sampling.fragment_length=16"])
    assert not spec.discrete and spec.n_actions == 1
    a, _ = col.collect()
    assert a["action"].shape == (16, 2, 1) and a["action"].dtype == np.float32
    assert Layout(spec, 16, algo.extras).problem(a) == ""
    assert {"rms_mean", "rms_var", "rms_count"} <= set(a) and a["rms_count"][0] == 32
    assert (a["reward"] <= 0).all() and a["reward"].min() < -2 * 0.5  # doubled Pendulum cost


def test_env_seeds_are_distinct_and_reproducible():
    s = env_seeds(0, 1, 4)
    assert len(set(s)) == 4 and s == env_seeds(0, 1, 4) and s != env_seeds(0, 2, 4)


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_pendulum_ppo_runs_in_one_process(tmp_path):
    r = verl("run", str(CONFIGS / "cartpole_ppo.toml"), "--run-dir", str(tmp_path),
             "--set", 'environment.id="Pendulum-v1"', "--set", "environment.normalize_obs=true",
             "--set", "training.total_timesteps=3000", "--set", "sampling.num_workers=2",
             "--set", "evaluation.interval_steps=1500", "--set", "evaluation.n_eval_episodes=2",
             timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    evs = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    assert any(e.get("event") == "evaluated" and e["eval/return_mean"] < 0 for e in evs)


def test_samplers_explore_apart_from_identical_weights():
    import torch

    from verl_zmq.config.members import acting_seeds

    seeds = {acting_seeds(0, g, i) for g in ("main", "peer0", "peer1") for i in range(8)}
    assert len(seeds) == 24 and acting_seeds(0, "main", 3) == acting_seeds(0, "main", 3)
    job = load_job(CONFIGS / "cartpole_dqn.toml", ["algorithm.params.eps_start=1.0"])
    spec = env_spec(job.environment)
    algos = []
    for i in range(2):
        torch.manual_seed(job.experiment.seed)  # as a sampler does: the job's weights
        algos.append(make_algorithm(job, spec, worker=(i, 2),
                                    acting_seed=acting_seeds(0, "main", i)[1]))
    for k, v in algos[0].policy_arrays().items():
        np.testing.assert_array_equal(v, algos[1].policy_arrays()[k])
    obs = np.zeros((256, 4), np.float32)
    a0, a1 = (a.act(obs)[0] for a in algos)  # epsilon 1: all random, drawn apart
    assert (a0 != a1).mean() > 0.3


def test_info_numbers_are_taken_where_episodes_end_by_samplers_and_evaluations():
    """`logging.info_keys` (is_success by default): the value the env reports at an
    episode's last step, one per episode, for samplers and evaluations alike."""
    from verl_zmq.policy.evaluate import evaluate

    job, _, algo, col = _collector(['environment.id="tests.envs:Counting"',
                                    "sampling.fragment_length=25"])
    a, _ = col.collect()  # 2 envs x 25 steps: 4 episodes of 10 end
    taken = col.infos_taken()
    assert len(taken["is_success"]) == len(a["ep_return"]) == 4
    assert set(taken["is_success"]) <= {0.0, 1.0} and col.infos_taken() == {}
    infos: dict = {}
    seen = []
    rets = evaluate(algo, job, None, 3, 0, infos=infos, progress=lambda d, n: seen.append(d))
    assert len(rets) == 3 and len(infos["is_success"]) == 3 and seen[-1] == 3
    job, _, algo, col = _collector(['environment.id="tests.envs:Counting"',
                                    "logging.info_keys=[]"])
    col.collect()
    assert col.infos_taken() == {}
