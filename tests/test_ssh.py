"""verl-launch across "hosts" reached through a real OpenSSH server on loopback
aliases (127.0.0.2-4): a CartPole PPO job placed across three hosts learns while
a sampler and then the replay shard on the learner's host are killed with -9
and restarted; a launcher killed with -9 leaves no process behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from tests.conftest import (
    CONFIGS,
    PY,
    ROOT,
    free_port_range,
    kill_launcher_once_training,
    kill_tree,
    read_events,
    sampler_sampling,
    wait_for,
)
from tests.sshd import ADDRESSES, start_sshd, unavailable

pytestmark = pytest.mark.e2e  # real processes

TARGET, BUDGET = 475.0, 100_000
HB, LIVENESS, GRACE = 1.0, 3, 10.0


@pytest.fixture(scope="session")
def sshd(tmp_path_factory):
    why = unavailable()
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"SSH tests must run in CI: {why}")
        pytest.skip(why)
    s = start_sshd(tmp_path_factory.mktemp("sshd"))
    yield s
    s.stop()


def _hosts(tmp, sshd) -> str:
    path = tmp / "hosts.txt"
    a, b, c = ADDRESSES
    path.write_text(f"{a}:{sshd.port} roles=registry,learner,replay,evaluator,sampler\n"
                    f"{b}:{sshd.port} roles=sampler\n{c}:{sshd.port} roles=sampler\n")
    return str(path)


def _start(tmp, sshd, extra=()) -> tuple[subprocess.Popen, object]:
    run = tmp / "run"
    lo, hi = free_port_range()
    opts = json.dumps(sshd.ssh_options)
    proc = subprocess.Popen(
        [PY, "-m", "launcher.cli", _hosts(tmp, sshd), str(CONFIGS / "cartpole_ppo.toml"),
         "--run-dir", str(run), "--set", f"launch.port_range=[{lo}, {hi}]",
         "--set", f"launch.ssh_options={opts}", "--set", f'launch.python="{PY}"',
         "--set", f'launch.workdir="{ROOT}"', *extra],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)
    return proc, run


def _pid(run, member):
    starts = [e for e in read_events(run / "logs" / f"{member}.jsonl")
              if e.get("event") == "role_started"]
    return (starts[-1]["pid"], len(starts)) if starts else (None, 0)


def _restarted(run, member) -> bool:
    return any(e.get("event") == "role_restarted" and e.get("member") == member
               for e in read_events(run / "logs" / "launcher.jsonl"))


@pytest.fixture(scope="session")
def ssh_job(sshd, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ssh-job")
    # it ends at the target: what it shows is placement, logs and restarts across hosts
    proc, run = _start(tmp, sshd, ["--set", f"evaluation.stop_at_return={TARGET}"])
    try:
        # sampler-0 and sampler-3 share the learner's host (127.0.0.2); kill one, then the
        # shard, early: once sampler-0 steps its envs, not at its first metrics event
        # (5 s on), which a run that reaches the target fast may never see
        wait_for(lambda: sampler_sampling(run, "sampler-0"), 180, what="sampler-0 sampling")
        os.kill(_pid(run, "sampler-0")[0], signal.SIGKILL)
        wait_for(lambda: _restarted(run, "sampler-0"), 60, what="sampler-0 restarted")
        # the shard's start is not ordered with a sampler's first steps (a PUSH queues)
        wait_for(lambda: _pid(run, "replay-0")[0], 120, what="replay-0 started")
        os.kill(_pid(run, "replay-0")[0], signal.SIGKILL)
        wait_for(lambda: _restarted(run, "replay-0"), 60, what="replay-0 restarted")
        out, err = proc.communicate(timeout=900)
    finally:
        kill_tree(proc)
    return {"run": run, "rc": proc.returncode, "stderr": err}


@pytest.mark.timeout(1200)
def test_three_host_job_reaches_target_with_every_log(ssh_job):
    run = ssh_job["run"]
    assert ssh_job["rc"] == 0, ssh_job["stderr"][-3000:]
    summary = json.loads((run / "summary.json").read_text())
    reached = [e for e in summary["evaluations"] if e["return_mean"] >= TARGET]
    assert reached and reached[0]["env_steps"] <= BUDGET, summary["evaluations"]
    plan = json.loads((run / "plan.json").read_text())
    hosts = {p["member_id"]: plan["hosts"][p["host"]]["address"] for p in plan["placements"]}
    assert set(hosts.values()) == set(ADDRESSES)
    joined = {e["member"]: e["member_host"] for e in read_events(run / "logs" / "registry.jsonl")
              if e.get("event") == "member_joined"}
    for member, address in hosts.items():
        evs = read_events(run / "logs" / f"{member}.jsonl")
        assert any(e["event"] == "role_started" for e in evs), member
        if member != "registry":
            assert joined[member] == address, (member, joined.get(member))


@pytest.mark.timeout(1200)
def test_killed_sampler_and_shard_on_the_learners_host_are_restarted(ssh_job):
    run = ssh_job["run"]
    launcher = read_events(run / "logs" / "launcher.jsonl")
    for member in ("sampler-0", "replay-0"):
        assert any(e["event"] == "role_died" and e["member"] == member for e in launcher)
        assert any(e["event"] == "role_restarted" and e["member"] == member for e in launcher)
        assert _pid(run, member)[1] >= 2  # two incarnations logged
    summary = json.loads((run / "summary.json").read_text())
    assert summary["restarts"]["sampler-0"] >= 1 and summary["restarts"]["replay-0"] >= 1


@pytest.mark.timeout(1200)
def test_curve_was_on_for_the_remote_job(ssh_job):
    job = (ssh_job["run"] / "job.toml").read_text()
    assert 'curve = "auto"' in job
    # the launcher's keys file alone, readable by its owner only (roles get theirs on stdin)
    found = list((ssh_job["run"]).glob("**/*key*"))
    assert [p.relative_to(ssh_job["run"]).as_posix() for p in found] == ["keys.json"]
    assert found[0].stat().st_mode & 0o777 == 0o600


@pytest.mark.timeout(600)
def test_launcher_killed_with_sigkill_leaves_no_process(sshd, tmp_path):
    proc, run = _start(tmp_path, sshd, ["--set", "training.total_timesteps=10000000",
                                        "--set", "launch.evaluators=0"])
    try:
        kill_launcher_once_training(proc, run, 180, HB * LIVENESS + GRACE + 10)
    finally:
        kill_tree(proc)
