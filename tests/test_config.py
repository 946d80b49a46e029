"""Job files: the seed example loads, overrides apply, every bad file is refused
with exit code 2 and a one-paragraph message naming the key or line."""

from __future__ import annotations

import pytest

from tests.conftest import CONFIGS, DATA, verl
from verl_zmq.config import ConfigError, PPOParams, build_job, dumps_job, load_job, loads_job


def test_seed_example_loads_one_to_one():
    job = load_job(CONFIGS / "cartpole_ppo.toml")
    assert job.environment.id == "CartPole-v1"
    assert job.sampling.num_workers == 4 and job.sampling.num_envs_per_worker == 2
    assert job.sampling.mode == "async" and job.sampling.sync_interval_steps == 20
    p = job.algorithm.params
    assert isinstance(p, PPOParams)
    assert (p.clip_range, p.gamma, p.gae_lambda, p.ent_coef, p.vf_coef, p.max_grad_norm) == \
        (0.2, 0.99, 0.95, 0.01, 0.5, 0.5)
    assert job.training.total_timesteps == 100_000
    assert job.resources.learner.cpu == 1 and job.resources.sampler.memory == "2GB"


def test_overrides_parse_toml_values_else_strings():
    job = load_job(CONFIGS / "cartpole_ppo.toml", ["training.total_timesteps=5000",
                                                  "experiment.name=other run",
                                                  "algorithm.policy.hidden_sizes=[32, 32]",
                                                  "evaluation.stop_at_return=475"])
    assert job.training.total_timesteps == 5000
    assert job.experiment.name == "other run"
    assert job.algorithm.policy.hidden_sizes == [32, 32]
    assert job.evaluation.stop_at_return == 475.0
    with pytest.raises(ConfigError, match="training.total_timesteps: expected an integer"):
        load_job(CONFIGS / "cartpole_ppo.toml", ["training.total_timesteps=many"])
    with pytest.raises(ConfigError, match="did you mean 'total_timesteps'"):
        load_job(CONFIGS / "cartpole_ppo.toml", ["training.total_timestep=1"])


def test_resolved_job_round_trips():
    job = load_job(CONFIGS / "cartpole_ppo.toml", ["environment.kwargs.render_mode=rgb_array"])
    again = loads_job(dumps_job(job), "resolved")
    assert again == job


BAD_JOBS = {
    "misspelt_key.toml": "training.total_timestep (did you mean 'total_timesteps'?)",
    "wrong_type.toml": "training.total_timesteps: expected an integer",
    "missing_section.toml": "missing section [algorithm]",
    "toml_syntax.toml": "line 9",
    "zero_workers.toml": "sampling.num_workers: expected a positive number",
    "bad_choice.toml": "did you mean 'prioritized'?",
    "misspelt_param.toml": "algorithm.params.learning_rat (did you mean 'learning_rate'?)",
    "misspelt_section.toml": "samplin (did you mean 'sampling'?)",
    "bad_port_range.toml": "launch.port_range",
    "bad_curve.toml": "security.curve",
    "float_for_int.toml": "sampling.num_envs_per_worker: expected an integer",
    "offpolicy_replay_for_ppo.toml": "replay.mode: ppo is on-policy",
    "minibatch_too_big.toml": "algorithm.params.minibatch_size",
    "list_as_string.toml": "algorithm.policy.hidden_sizes: expected an array",
    "registry_port_outside.toml": "launch.registry_port",
    "duplicate_table.toml": "training",
    "negative_interval.toml": "evaluation.interval_steps: expected a positive number",
    "capacity_below_fragment.toml": "replay.capacity",
    "bad_level.toml": "logging.level",
    "unknown_algorithm.toml": "algorithm.name",
}
BAD_ENVS = {
    "bad_env_id.toml": "closest registered ids: CartPole-v1",
    "policy_does_not_fit.toml": "algorithm.policy.dueling",
    "unsupported_space.toml": "Text at obs.x is not supported",
    "too_much_memory.toml": "GiB",
    "bad_entry_point.toml": "has no 'NoSuchEnv'",
    "dqn_on_continuous.toml": "Pendulum-v1 has Box actions, which dqn does not take",
}


def test_corpus_is_complete():
    assert set(BAD_JOBS) == {p.name for p in (DATA / "bad_jobs").glob("*.toml")}
    assert set(BAD_ENVS) == {p.name for p in (DATA / "bad_envs").glob("*.toml")}


def _assert_clear_refusal(r, path, expect):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout
    msg = r.stderr.strip()
    assert msg.count("\n") == 0, msg  # one paragraph
    assert path.name in msg, msg
    assert expect in msg, msg


@pytest.mark.e2e
@pytest.mark.parametrize("name", sorted(BAD_JOBS))
def test_bad_job_file_is_refused(name):
    path = DATA / "bad_jobs" / name
    _assert_clear_refusal(verl("check", str(path), timeout=60), path, BAD_JOBS[name])


@pytest.mark.e2e
@pytest.mark.parametrize("name", sorted(BAD_ENVS))
def test_bad_env_is_refused_by_check(name):
    path = DATA / "bad_envs" / name
    _assert_clear_refusal(verl("check", str(path), timeout=120), path, BAD_ENVS[name])


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.toml")), ids=lambda p: p.name)
def test_every_shipped_job_file_loads(path):
    job = load_job(path)
    assert loads_job(dumps_job(job), "resolved") == job


def test_replay_mode_follows_the_algorithm_unless_set():
    base = {"experiment": {"name": "x"}, "environment": {"id": "CartPole-v1"},
            "training": {"total_timesteps": 1000}}
    assert build_job({**base, "algorithm": {"name": "dqn"}}).replay.mode == "uniform"
    assert build_job({**base, "algorithm": {"name": "ppo"}}).replay.mode == "fifo"
    job = build_job({**base, "algorithm": {"name": "dqn"}, "replay": {"mode": "prioritized"}})
    assert job.replay.mode == "prioritized"


def test_another_algorithms_name_on_a_job_says_what_matters_and_where_to_start():
    from verl_zmq.ops.checks import config_problem

    ppo = CONFIGS / "cartpole_ppo.toml"
    with pytest.raises(ConfigError) as e:
        load_job(ppo, ['algorithm.name="dqn"'])
    msg = config_problem(e.value)
    assert msg.startswith('--set algorithm.name="dqn": algorithm.params: ')
    assert "are ppo's keys, not dqn's" in msg and "configs/cartpole_dqn.toml" in msg
    with pytest.raises(ConfigError) as e:
        load_job(ppo, ['algorithm.name="sac"'])
    msg = config_problem(e.value)  # the action space comes first: sac cannot act here
    assert "CartPole-v1 has Discrete actions, which sac does not take" in msg, msg
    assert "start from a sac job (configs/pendulum_sac.toml)" in msg
