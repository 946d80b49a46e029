"""An env outside gymnasium's API is named before anything starts: `verl check`
(and a launch) reset it and step it at random, and every answer is checked
against the API and the observation space, with the key and the shapes."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from tests.conftest import CONFIGS, verl_here
from verl_zmq.config import ConfigError, build_job, load_job
from verl_zmq.envs.contract import ContractError, mismatch
from verl_zmq.envs.make import make_env
from verl_zmq.ops.checks import check_job

JOB = str(CONFIGS / "cartpole_ppo.toml")

BROKEN = {
    "WrongShape": "environment 'tests.envs:WrongShape': step() returned obs: got shape (3,), "
                  "space (2,)",
    "MissingKey": "step() returned obs['vel']: missing (the space has keys pos, vel, got pos)",
    "FourTuple": "step() returned 4 values (obs, reward, done, info: the gym API before 0.26)",
    "Flaky": "RuntimeError: flaky env: the simulator crashed (raised while it was reset and "
             "stepped with random actions by the check); fix the env, or if it fails only now "
             "and then set environment.step_timeout_s > 0",
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_verl_check_names_each_broken_env_and_exits_2(name):
    r = verl_here("check", JOB, "--set", f'environment.id="tests.envs:{name}"')
    assert r.returncode == 2, r.stdout + r.stderr
    assert BROKEN[name] in r.stderr, r.stderr
    print(r.stderr.strip())  # the line a user sees (-s shows it)


def test_the_good_env_passes_and_a_dry_run_steps_it_too():
    r = verl_here("check", JOB, "--set", 'environment.id="tests.envs:Counting"')
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


def test_structure_mismatches_name_the_key_and_both_shapes():
    box = gym.spaces.Box(0, 1, (2,))
    space = gym.spaces.Dict({"a": box, "t": gym.spaces.Tuple((gym.spaces.Discrete(3), box))})
    ok = {"a": np.zeros(2), "t": (1, np.zeros(2))}
    assert mismatch(ok, space) == ""
    assert mismatch({**ok, "a": np.zeros(3)}, space) == "obs['a']: got shape (3,), space (2,)"
    assert mismatch({**ok, "b": 1}, space) == "obs['b']: not in the space (its keys: a, t)"
    assert mismatch({**ok, "t": (1, np.zeros(1))}, space) == \
        "obs['t'][1]: got shape (1,), space (2,)"
    assert "the space is a Tuple of 2" in mismatch({**ok, "t": (1,)}, space)
    assert "the space is Discrete" in mismatch(np.zeros(2), gym.spaces.Discrete(3))
    assert mismatch([0.0, 1.0], box) == ""  # a list of the right shape is fine


def test_at_run_time_the_first_bad_answer_raises_with_the_env_named():
    job = load_job(JOB, ['environment.id="tests.envs:MissingKey"'])
    env = make_env(job.environment)
    env.reset(seed=0)
    with pytest.raises(ContractError, match=r"obs\['vel'\]: missing"):
        env.step(0)


def test_a_class_of_the_running_script_or_a_class_object_gets_the_import_path_fix():
    job = load_job(JOB, ['environment.id="__main__:Tiny"'])
    (why,) = check_job(job, networks=False)
    assert "a class defined in the running script cannot be imported" in why
    assert '"mymodule:Tiny"' in why and "the current folder is importable" in why

    class Tiny(gym.Env):
        pass

    raw = {"experiment": {"name": "x"}, "environment": {"id": Tiny},
           "algorithm": {"name": "ppo"}, "training": {"total_timesteps": 1000}}
    with pytest.raises(ConfigError, match="got the class .*Tiny itself; name it by its import "
                                          "path instead, \"tests.test_env_contract:"):
        build_job(raw)


def test_a_module_that_is_not_importable_says_where_it_must_be():
    job = load_job(JOB, ['environment.id="reachpkg.envs:Corridor"'])
    (why,) = check_job(job, networks=False)
    assert "No module named 'reachpkg'" in why and "PYTHONPATH" in why
