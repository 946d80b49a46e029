"""Inside a Slurm allocation roles start as job steps (`srun`), not over SSH.
No Slurm daemon runs here: a fake `srun` on PATH records its arguments and runs
the command locally, and the allocation's nodes are loopback addresses."""

from __future__ import annotations

import json
import os
import stat
import subprocess

import pytest

from tests.conftest import (
    CONFIGS,
    PY,
    ROOT,
    free_port_range,
    kill_launcher_once_training,
    kill_tree,
    launch,
    read_events,
)
from verl_zmq.config import load_job

pytestmark = pytest.mark.e2e  # real processes

FAKE_SRUN = """#!/bin/sh
# record the step's arguments, drop srun's own (all --opt=value), run the rest here
echo "$@" >> "$FAKE_SRUN_LOG"
while [ $# -gt 0 ]; do
  case "$1" in --*) shift ;; *) break ;; esac
done
exec "$@"
"""


def test_a_slurm_dry_run_shows_srun_job_steps_only(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_NODELIST", "node[01-03]")
    monkeypatch.setenv("SLURM_NTASKS_PER_NODE", "3")
    r = launch("--dry-run", "slurm", str(CONFIGS / "cartpole_ppo.toml"), "--run-dir",
               str(tmp_path / "run"), timeout=60)
    assert r.returncode == 0, r.stderr
    commands = r.stdout.split("commands (the job arrives on stdin):", 1)[1].strip().splitlines()
    assert len(commands) == 8  # registry, learner, shard, evaluator, four samplers
    for line in commands:
        step = line.split(": ", 1)[1]
        assert step.startswith("srun --nodes=1 --ntasks=1 --nodelist=node0"), step
        assert "--overlap" in step and "--kill-on-bad-exit=0" in step
        assert "ssh" not in step.split(" -m verl_zmq.cli")[0]
        assert "--exit-on-stdin-eof" in step and "--job -" in step
    assert "--cpus-per-task=1" in r.stdout  # resources.sampler.cpu and resources.learner.cpu
    assert not (tmp_path / "run").exists()


def _allocation(tmp_path, monkeypatch) -> tuple[object, object]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    srun = bin_dir / "srun"
    srun.write_text(FAKE_SRUN)
    srun.chmod(srun.stat().st_mode | stat.S_IXUSR)
    log = tmp_path / "srun.log"
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SRUN_LOG", str(log))
    monkeypatch.setenv("SLURM_JOB_NODELIST", "127.0.0.[2-3]")
    monkeypatch.setenv("SLURM_NTASKS_PER_NODE", "8")
    return log, tmp_path / "run"


def _start(run, *sets: str) -> subprocess.Popen:
    lo, hi = free_port_range()
    argv = [PY, "-m", "launcher.cli", "slurm", str(CONFIGS / "cartpole_ppo.toml"),
            "--run-dir", str(run), "--set", f"launch.port_range=[{lo}, {hi}]"]
    for s in sets:
        argv += ["--set", s]
    return subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


@pytest.mark.timeout(600)
def test_a_job_runs_to_its_end_as_slurm_job_steps(tmp_path, monkeypatch):
    log, run = _allocation(tmp_path, monkeypatch)
    proc = _start(run, "evaluation.stop_at_return=150", "evaluation.interval_steps=2500")
    try:
        out, err = proc.communicate(timeout=480)
    finally:
        kill_tree(proc)
    assert proc.returncode == 0, err[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "done"
    steps = log.read_text().splitlines()
    nodes = {a.split("=", 1)[1] for s in steps for a in s.split() if a.startswith("--nodelist=")}
    assert nodes == {"127.0.0.2", "127.0.0.3"}
    members = {a.split("=", 1)[1] for s in steps for a in s.split() if a.startswith("--job-name=")}
    assert {"verl-registry", "verl-learner-0", "verl-replay-0", "verl-sampler-0"} <= members
    starts = [e for e in read_events(run / "logs" / "sampler-1.jsonl")
              if e.get("event") == "role_started"]
    argv = starts[0]["argv"]
    assert argv[argv.index("--bind") + 1] in ("127.0.0.2", "127.0.0.3")


@pytest.mark.timeout(600)
def test_a_launcher_killed_in_an_allocation_leaves_no_process(tmp_path, monkeypatch):
    _, run = _allocation(tmp_path, monkeypatch)
    proc = _start(run, "training.total_timesteps=10000000", "launch.evaluators=0")
    try:
        L = load_job(CONFIGS / "cartpole_ppo.toml").launch
        kill_launcher_once_training(
            proc, run, 240, L.heartbeat_interval_s * L.heartbeat_liveness + L.grace_s + 10)
    finally:
        kill_tree(proc)
