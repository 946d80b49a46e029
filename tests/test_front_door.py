"""The front door: the Python API end to end, the command line's conventions and
its faults, the closing block of a run that could not write its checkpoints, and
wrappers and package-registered env ids from the job file."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from tests.conftest import CONFIGS, PY, ROOT, free_port_range, launch, read_events, verl

pytestmark = pytest.mark.e2e  # real processes


def _ports() -> dict[str, object]:
    lo, hi = free_port_range()
    return {"launch.port_range": [lo, hi]}


@pytest.mark.timeout(600)
def test_train_load_policy_and_evaluate_from_python(tmp_path):
    code = f"""
import json, sys
import gymnasium as gym, numpy as np
import verl_zmq
assert "torch" not in sys.modules  # import verl_zmq stays light
run = verl_zmq.train({str(CONFIGS / "cartpole_ppo.toml")!r}, run_dir={str(tmp_path / "run")!r},
                     overrides={{"evaluation.stop_at_return": 475,
                                 "launch.port_range": {_ports()["launch.port_range"]!r}}})
p = verl_zmq.load_policy(run.best_checkpoint)
env = gym.make("CartPole-v1")
obs, _ = env.reset(seed=123)
one = p.act(obs)
batch = p.act(np.stack([obs, obs]))
ev = verl_zmq.evaluate(run.best_checkpoint, episodes=3)
print(json.dumps({{"status": run.status, "best": run.best_return, "final": run.final_return,
                  "ckpt": str(run.best_checkpoint), "one": int(one), "batch": batch.tolist(),
                  "eval": ev.mean, "n": len(ev.returns)}}))
"""
    r = subprocess.run([PY, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                       timeout=540)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["status"] == "done" and out["best"] >= 475, out
    assert out["ckpt"].endswith("checkpoints/best.pt") and out["one"] in (0, 1)
    assert out["batch"] == [out["one"], out["one"]] and out["n"] == 3
    assert "best checkpoint" in r.stderr and "verl eval" in r.stderr


def test_train_refuses_a_bad_override_naming_it():
    code = ("import verl_zmq\n"
            "try:\n    verl_zmq.train('configs/cartpole_ppo.toml', "
            "overrides={'training.nope': 1})\n"
            "except ValueError as e:\n    print(e)\n")
    r = subprocess.run([PY, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "--set training.nope=1: unknown key training.nope" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("argv, code, says", [
    (["--dry-run", "local", "configs/cartpole_ppo.toml", "--set", 'environment.id="Nope-v9"'],
     2, "--set environment.id=\"Nope-v9\": environment.id: unknown gymnasium env 'Nope-v9'"),
    (["local", "configs/cartpole_ppo.toml", "--set", "training.bogus=1"],
     2, "--set training.bogus=1: unknown key training.bogus"),
    (["--version"], 0, "verl-launch, version"),
    (["-h"], 0, "Exit codes: 0 done"),
])
def test_verl_launch_command_line(argv, code, says):
    r = launch(*argv, timeout=120)
    assert r.returncode == code and says in r.stdout + r.stderr, r.stdout + r.stderr


@pytest.mark.parametrize("argv, says", [
    (["logs", "runs", "--level", "warn"], "'warn' is not one of 'debug', 'info', 'warning'"),
    (["logs", "runs", "--role", "learnr"], "--role learnr: neither a role (registry, sampler"),
    (["check", "no/such/job.toml"], "does not exist"),
])
def test_verl_refuses_typos_with_the_valid_choices(argv, says, tmp_path):
    argv = [str(tmp_path) if a == "runs" else a for a in argv]
    r = verl(*argv, timeout=60)
    assert r.returncode == 2 and says in r.stderr, r.stderr
    assert "--version" in verl("-h", timeout=60).stdout


@pytest.mark.timeout(600)
def test_skipped_checkpoints_reach_the_terminal_summary_and_exit_code(tmp_path):
    run = tmp_path / "run"
    lo, hi = free_port_range()
    r = launch("local", str(CONFIGS / "cartpole_ppo.toml"), "--run-dir", str(run),
               "--set", f"launch.port_range=[{lo}, {hi}]",
               "--set", "training.total_timesteps=4096",
               "--set", "checkpoint.interval_steps=1024",
               "--set", "checkpoint.min_free_mb=1000000000",
               "--set", "evaluation.interval_steps=2048", timeout=540)
    assert r.returncode == 3, r.stderr[-3000:]  # done, but its checkpoints were skipped
    assert "warning: learner-0: checkpoint_skipped" in r.stderr and "free_mb=" in r.stderr
    assert "checkpoints were skipped or failed" in r.stderr
    summary = json.loads((run / "summary.json").read_text())
    skipped = [w for w in summary["warnings"] if w["event"] == "checkpoint_skipped"]
    assert summary["exit_code"] == 3 and summary["checkpoints_missing"] and skipped
    assert skipped[0]["count"] >= 2 and "min_free_mb=1000000000" in skipped[0]["first"]


@pytest.mark.timeout(600)
def test_wrappers_and_package_env_ids_apply_to_samplers_and_evaluator(tmp_path):
    """gymnasium's `pkg.module:Env-v0` form, and a TimeLimit from environment.wrappers:
    every episode, the samplers' and the evaluator's, ends by step 30."""
    run = tmp_path / "run"
    lo, hi = free_port_range()
    r = launch("local", str(CONFIGS / "cartpole_ppo.toml"), "--run-dir", str(run),
               "--set", f"launch.port_range=[{lo}, {hi}]",
               "--set", 'environment.id="tests.envs:VerlTests/Corridor-v0"',
               "--set", 'environment.wrappers=[{wrapper = "gymnasium.wrappers:TimeLimit", '
                        'kwargs = {max_episode_steps = 30}}]',
               "--set", "training.total_timesteps=4096", "--set", "evaluation.interval_steps=2048",
               "--set", "logging.interval_s=0.5", timeout=540)
    assert r.returncode == 0, r.stderr[-3000:]
    evals = [e for e in read_events(run / "logs" / "evaluator-0.jsonl")
             if e.get("event") == "evaluated"]
    assert evals and all(e["eval/return_mean"] <= 30 for e in evals), evals
    lengths = [e["sampler/episode_length_mean"] for p in (run / "logs").glob("sampler-*.jsonl")
               for e in read_events(p) if "sampler/episode_length_mean" in e]
    assert lengths and max(lengths) <= 30 and np.mean(lengths) > 1, lengths


@pytest.mark.timeout(300)
def test_verl_run_stops_every_role_when_one_fails(tmp_path):
    """In one process there is no launcher to restart a role: a sampler whose env
    raises ends the run with its error and exit 1, instead of a job that waits."""
    r = verl("run", str(CONFIGS / "cartpole_ppo.toml"), "--run-dir", str(tmp_path / "run"),
             "--set", 'environment.id="tests.envs:FaultyCartPole"',
             "--set", "environment.kwargs={raise_every=300}", "--no-env-check", timeout=240)
    assert r.returncode == 1 and "exited with code 1; stopping every role" in r.stderr, \
        r.stderr[-2000:]


@pytest.mark.timeout(600)
def test_resume_reads_the_run_folder_and_refuses_another_job(tmp_path):
    run = tmp_path / "run"
    lo, hi = free_port_range()
    sets = ["--set", f"launch.port_range=[{lo}, {hi}]", "--set", "evaluation.interval_steps=2048"]
    first = launch("local", str(CONFIGS / "cartpole_ppo.toml"), "--run-dir", str(run), *sets,
                   "--set", "training.total_timesteps=2048", timeout=540)
    assert first.returncode == 0, first.stderr[-2000:]
    other = launch("--resume", str(run), str(CONFIGS / "cartpole_dqn.toml"), timeout=120)
    assert other.returncode == 2 and "is not the job this run was started with" in other.stderr
    assert "algorithm.name" in other.stderr, other.stderr
    again = launch("--resume", str(run), *sets, "--set", "training.total_timesteps=4096",
                   timeout=540)  # no hosts, no job: the run folder's
    assert again.returncode == 0, again.stderr[-2000:]
    resumed = [e for e in read_events(run / "logs" / "learner-0.jsonl")
               if e.get("event") == "resumed"]
    assert resumed and resumed[-1]["env_steps"] >= 2048, resumed
