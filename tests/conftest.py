"""Shared helpers: free ports, subprocess roles, log polling, deadlines."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tools.harness import events as read_events  # noqa: F401 - the tests' names
from tools.harness import free_ports as free_port_range
from tools.harness import poll

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs"
DATA = Path(__file__).resolve().parent / "data"
PY = sys.executable


def wait_for(pred, timeout: float, every: float = 0.2, what: str = "condition"):
    v = poll(pred, timeout, every)
    if not v:
        raise AssertionError(f"timed out after {timeout:.1f}s waiting for {what}")
    return v


def verl(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "verl_zmq.cli", *args], capture_output=True, text=True,
                          timeout=kw.pop("timeout", 120), cwd=kw.pop("cwd", ROOT), **kw)


def verl_here(*args: str) -> subprocess.CompletedProcess:
    """`verl ARGS` in this process through click's runner, for commands that only
    read and check (an interpreter of their own costs seconds of imports each);
    exit code, stdout and stderr as `verl` gives them."""
    from click.testing import CliRunner

    from verl_zmq.cli import main

    r = CliRunner().invoke(main, list(args))
    return subprocess.CompletedProcess(list(args), r.exit_code, r.stdout, r.stderr)


def run_events(job: str, run_dir, *overrides: str, timeout: float = 240) -> list[dict]:
    """`verl run JOB` in one process with `--set` overrides; its JSON events (the
    run must succeed)."""
    sets = [x for o in overrides for x in ("--set", o)]
    r = verl("run", str(CONFIGS / job), "--run-dir", str(run_dir), *sets, timeout=timeout)
    assert r.returncode == 0, r.stderr[-2000:]
    return [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]


def launch(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "launcher.cli", *args], capture_output=True, text=True,
                          timeout=kw.pop("timeout", 120), cwd=kw.pop("cwd", ROOT), **kw)


def job_processes(marker: str) -> list[str]:
    """`pid args` of every process whose command line holds `marker` (a run folder)."""
    r = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True)
    return [line for line in r.stdout.splitlines()
            if marker in line and "ps -eo" not in line and "-m pytest" not in line]


def learner_training(run: Path) -> bool:
    """Whether learner-0 of the run has reported env steps (it has trained)."""
    return any(e.get("event") == "metrics" and e.get("learner/env_steps", 0) > 0
               for e in read_events(run / "logs" / "learner-0.jsonl"))


def sampler_sampling(run: Path, member: str) -> bool:
    """Whether `member` (a sampler) of the run steps its envs: the earliest point a
    test can kill it mid-job, since the job cannot end before its learner trains."""
    return any(e.get("event") == "sampling_started"
               for e in read_events(run / "logs" / f"{member}.jsonl"))


def kill_launcher_once_training(proc: subprocess.Popen, run: Path, wait_s: float,
                                stop_s: float) -> None:
    """Once the learner trains, SIGKILL the launcher alone (not its children); then
    every process of the job must be gone within `stop_s` (its roles see their
    stdin close)."""
    wait_for(lambda: learner_training(run), wait_s, what="the job training")
    assert job_processes(str(run))
    proc.send_signal(signal.SIGKILL)
    wait_for(lambda: not job_processes(str(run)), stop_s,
             what=f"no process of the job left (still: {job_processes(str(run))})")


def member_pid(run: Path, member: str) -> int | None:
    """The pid of the newest process the launcher started as `member` (None: none yet)."""
    pids = [e["pid"] for e in read_events(run / "logs" / "launcher.jsonl")
            if e.get("event") == "role_started" and e.get("member") == member]
    return pids[-1] if pids else None


def kill_member(run: Path, member: str) -> int:
    """SIGKILL the newest process of `member` (it must have started); its pid."""
    pid = member_pid(run, member)
    assert pid is not None, f"{member} never started"
    os.kill(pid, signal.SIGKILL)
    return pid


def kill_tree(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, 9)
        except (ProcessLookupError, PermissionError):
            proc.kill()
    proc.wait(10)


def start_job(job: Path, run: Path, *sets: str, extra: tuple[str, ...] = ()
              ) -> subprocess.Popen:
    """verl-launch JOB on this host in its own session, ports from a free range; each of
    `sets` is a `--set` override, `extra` more launcher arguments."""
    lo, hi = free_port_range()
    argv = [PY, "-m", "launcher", str(CONFIGS / "hosts.local.txt"), str(job),
            "--set", f"launch.port_range=[{lo}, {hi}]", *extra]
    for s in sets:
        argv += ["--set", s]
    if "--resume" not in extra:
        argv += ["--run-dir", str(run)]
    return subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


@pytest.fixture
def ports():
    return free_port_range()


@pytest.fixture(scope="session")
def cartpole_run(tmp_path_factory):
    """The README's main job as real processes, shared by every check that needs a
    finished PPO run: it learns CartPole while sampler-1 is killed with -9, and ends
    at 475 (the rest of its 100k-step budget would show nothing more)."""
    run = tmp_path_factory.mktemp("cartpole") / "run"
    lo, hi = free_port_range()
    proc = subprocess.Popen(
        [PY, "-m", "launcher", str(CONFIGS / "hosts.local.txt"),
         str(CONFIGS / "cartpole_ppo.toml"), "--run-dir", str(run),
         "--set", f"launch.port_range=[{lo}, {hi}]", "--set", "evaluation.stop_at_return=475"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)
    killed = {}
    try:
        def sampler_pid():
            # once the sampler steps its envs, kill it mid-job. Waiting for its first
            # metrics event (logging.interval_s, 5 s) let a run that reached 475 at
            # 8,448 env steps end first, and the kill never came
            return member_pid(run, "sampler-1") if sampler_sampling(run, "sampler-1") else None

        pid = wait_for(sampler_pid, 120, what="sampler-1 sampling")
        os.kill(pid, signal.SIGKILL)
        killed = {"pid": pid, "t": time.time()}
        out, err = proc.communicate(timeout=600)
    finally:
        kill_tree(proc)
    return {"run": run, "rc": proc.returncode, "stdout": out, "stderr": err, "killed": killed}
