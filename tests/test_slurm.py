"""Inside a Slurm allocation roles start as job steps (`srun`), not over SSH: the
dry run's commands, from a faked allocation's environment (no daemon is needed
to print a plan). The real thing, on a real Slurm cluster, is
tests/test_slurm_real.py."""

from __future__ import annotations

import pytest

from tests.conftest import CONFIGS, launch

pytestmark = pytest.mark.e2e  # real processes

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
