"""The door as a new user meets it, with real processes: a broken env launched
anyway, an evaluator that cannot start, two jobs on one machine, a job of one's
own module run from its own folder, and callbacks from Python."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

import verl_zmq
from tests.conftest import CONFIGS, PY, ROOT, free_port_range, kill_tree

pytestmark = pytest.mark.e2e

SMALL = ["sampling.num_workers=2", "training.total_timesteps=4000",
         "evaluation.interval_steps=1000", "launch.standby=[]"]
COUNTING = 'environment.id="tests.envs:Counting"'


def _launch(run, *sets, extra=(), cwd=ROOT, ports=None, timeout=120):
    lo, hi = ports or free_port_range()
    argv = [PY, "-m", "launcher", "local", str(CONFIGS / "cartpole_ppo.toml"),
            "--run-dir", str(run), "--set", f"launch.port_range=[{lo}, {hi}]", *extra]
    for s in (*SMALL, *sets):
        argv += ["--set", s]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, env=env)


def _finish(proc, timeout=120):
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        kill_tree(proc)
    return proc.returncode, out, err


@pytest.mark.timeout(120)
def test_a_broken_env_launched_without_the_check_ends_at_once_with_its_error(tmp_path):
    t0 = time.monotonic()
    rc, _, err = _finish(_launch(tmp_path / "run", 'environment.id="tests.envs:WrongShape"',
                                 extra=("--no-env-check",)))
    took = time.monotonic() - t0
    assert rc == 1, err[-3000:]
    assert took < 30, took
    line = "ContractError: environment 'tests.envs:WrongShape': step() returned obs: got " \
           "shape (3,), space (2,)"
    # once as it happens, once in the closing block; the restarts are counted
    assert 1 <= err.count(line) <= 2, err
    assert "\x1b[" not in err  # no terminal codes from a library's warnings
    assert "failed for good: " in err and "traceback: " in err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["exit_code"] == 1
    trace = (tmp_path / "run" / "logs" / "sampler-0.err").read_text()
    assert "Traceback (most recent call last)" in trace and "contract.py" in trace


@pytest.mark.timeout(120)
def test_an_evaluator_that_fails_for_good_fails_the_job(tmp_path):
    # a budget the job cannot reach before the evaluator has failed for good: it ends
    # the job, not the budget
    rc, _, err = _finish(_launch(tmp_path / "run", COUNTING, "training.total_timesteps=1000000",
                                 "evaluation.env_kwargs={explode=true}"))
    assert rc == 1, err[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "failed" and "evaluator-0" in summary["failed_roles"]
    assert "this env refuses explode=True" in summary["failed_roles"]["evaluator-0"]


@pytest.mark.timeout(180)
def test_two_jobs_on_one_machine_in_one_port_range_both_finish(tmp_path):
    ports = free_port_range()
    procs = [_launch(tmp_path / f"run{i}", COUNTING, ports=ports) for i in range(2)]
    ends = [_finish(p, 150) for p in procs]
    for rc, _, err in ends:
        assert rc == 0, err[-3000:]
    registries = {json.loads((tmp_path / f"run{i}" / "plan.json").read_text())["registry"]
                  for i in range(2)}
    assert len(registries) == 2, registries
    for i in range(2):
        assert json.loads((tmp_path / f"run{i}" / "summary.json").read_text())["status"] == "done"
        assert not (tmp_path / f"run{i}" / "running.json").exists()


ENV_MODULE = '''
import gymnasium as gym
import numpy as np


class MyEnv(gym.Env):
    def __init__(self):
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.full(2, self.t / 10, np.float32), float(action == 1), self.t >= 10, False, {}
'''


@pytest.mark.timeout(180)
def test_a_job_of_ones_own_module_checks_and_trains_from_its_folder(tmp_path):
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "envs.py").write_text(ENV_MODULE)
    job = tmp_path / "job.toml"
    job.write_text('[experiment]\nname = "mine"\n[environment]\nid = "mypkg.envs:MyEnv"\n'
                   '[algorithm]\nname = "ppo"\n[training]\ntotal_timesteps = 3000\n'
                   '[sampling]\nnum_workers = 2\n[evaluation]\ninterval_steps = 1000\n')
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    verl = os.path.join(os.path.dirname(PY), "verl")
    r = subprocess.run([verl, "check", "job.toml"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr
    lo, hi = free_port_range()
    launch = os.path.join(os.path.dirname(PY), "verl-launch")
    r = subprocess.run([launch, "local", "job.toml", "--run-dir", "run", "--set",
                        f"launch.port_range=[{lo}, {hi}]"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=150)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["env_steps"] >= 3000


class _StopAtFirst(verl_zmq.Callback):
    def __init__(self):
        self.seen = []

    def on_evaluation(self, run, event):
        self.seen.append((run.env_steps, event["eval/return_mean"], event.get("eval/is_success")))
        return False


class _Broken(verl_zmq.Callback):
    def on_evaluation(self, run, event):
        raise KeyError("a bug in the callback")


@pytest.mark.timeout(180)
def test_callbacks_see_evaluations_and_may_stop_or_fail_the_job(tmp_path):
    lo, hi = free_port_range()
    over = {"environment.id": "tests.envs:Counting", "launch.port_range": [lo, hi],
            "training.total_timesteps": 200_000, "sampling.num_workers": 2,
            "evaluation.interval_steps": 1000, "launch.standby": []}
    stop = _StopAtFirst()
    run = verl_zmq.train(CONFIGS / "cartpole_ppo.toml", overrides=over,
                         run_dir=tmp_path / "a", callbacks=[stop])
    assert run.status == "done" and "_StopAtFirst.on_evaluation returned False" in \
        run.summary["stopped_by"]
    assert run.summary["env_steps"] < 200_000 and stop.seen
    assert stop.seen[0][2] is not None  # the env's info["is_success"], averaged
    with pytest.raises(KeyError, match="a bug in the callback"):
        verl_zmq.train(CONFIGS / "cartpole_ppo.toml", overrides=over,
                       run_dir=tmp_path / "b", callbacks=[_Broken()])
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert summary["status"] == "done" and "raised KeyError" in summary["stopped_by"]


def test_a_failed_start_leaves_no_run_folder(tmp_path, monkeypatch):
    from launcher import launch

    def broken(*a, **kw):
        raise RuntimeError("the supervisor could not start")

    monkeypatch.setattr(launch, "_supervisor", broken)
    with pytest.raises(RuntimeError):
        verl_zmq.train(CONFIGS / "cartpole_ppo.toml", run_dir=tmp_path / "r",
                       overrides={"environment.id": "tests.envs:Counting"})
    assert not (tmp_path / "r").exists()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
