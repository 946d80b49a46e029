"""A host lost with every role on it. Hosts are loopback addresses reached through
a fake `ssh` (tools/hosts/fake_ssh.py) that runs commands here and fails as ssh does
(exit 255) while the host is marked down: samplers on a lost host are waited
for and restarted when it answers again, the job goes on; a lost registry host
fails the job with a line naming it, without hanging."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from tests.conftest import (
    CONFIGS,
    PY,
    ROOT,
    free_port_range,
    kill_tree,
    learner_training,
    read_events,
    wait_for,
)
from tools.hosts.fake_ssh import lose_host

pytestmark = pytest.mark.e2e  # real processes

SAMPLERS_AWAY = ("127.0.0.2 roles=registry,learner,replay,evaluator,sampler\n"
                 "127.0.0.3 roles=sampler\n")
REGISTRY_AWAY = "127.0.0.2 roles=registry\n127.0.0.3\n"


def _start(tmp_path, monkeypatch, hosts: str, *sets: str):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").symlink_to(ROOT / "tools" / "hosts" / "fake_ssh.py")
    down = tmp_path / "down"
    down.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SSH_DOWN", str(down))
    (tmp_path / "hosts.txt").write_text(hosts)
    run = tmp_path / "run"
    lo, hi = free_port_range()
    argv = [PY, "-m", "launcher.cli", str(tmp_path / "hosts.txt"),
            str(CONFIGS / "cartpole_ppo.toml"), "--run-dir", str(run),
            "--set", f"launch.port_range=[{lo}, {hi}]", "--set", f'launch.python="{PY}"',
            "--set", f'launch.workdir="{ROOT}"']
    for s in sets:
        argv += ["--set", s]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    return proc, run, down


def _launcher_events(run, event: str) -> list[dict]:
    return [e for e in read_events(run / "logs" / "launcher.jsonl") if e.get("event") == event]


def _shipping_again(run, member: str, since: float) -> bool:
    """`member` restarted after `since` has shipped a fragment."""
    return any(e.get("event") == "metrics" and e["ts"] > since
               and e.get("sampler/fragments", 0) > 0
               for e in read_events(run / "logs" / f"{member}.jsonl"))


@pytest.mark.timeout(600)
def test_samplers_of_a_lost_host_come_back_when_it_answers(tmp_path, monkeypatch):
    # a budget the job never reaches: it is stopped once the host's samplers ship again
    proc, run, down = _start(tmp_path, monkeypatch, SAMPLERS_AWAY,
                             "training.total_timesteps=10000000", "logging.interval_s=1.0")
    try:
        wait_for(lambda: learner_training(run), 180, what="the job training")
        plan = json.loads((run / "plan.json").read_text())
        away = {p["member_id"] for p in plan["placements"]
                if plan["hosts"][p["host"]]["address"] == "127.0.0.3"}
        assert lose_host(down, "127.0.0.3")
        wait_for(lambda: {e["member"] for e in _launcher_events(run, "host_lost")} == away,
                 60, what="the loss noticed for every role there")
        lost = away
        time.sleep(2)
        assert proc.poll() is None  # the job goes on with the other host's samplers
        steps = [e["learner/env_steps"] for e in read_events(run / "logs" / "learner-0.jsonl")
                 if e.get("event") == "metrics"]
        (down / "127.0.0.3").unlink()  # the host answers again
        wait_for(lambda: _launcher_events(run, "host_back"), 120, what="the host probed back")
        back_at = _launcher_events(run, "host_back")[0]["ts"]
        wait_for(lambda: all(_shipping_again(run, m, back_at) for m in lost), 120,
                 what="the lost samplers shipping again")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        kill_tree(proc)
    assert proc.returncode == 130, err[-3000:]  # stopped by the test, every role cleanly
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    assert set(summary["lost_hosts"]["127.0.0.3"]) == lost
    assert all(m.startswith("sampler-") for m in lost)
    back = {e["member"] for e in _launcher_events(run, "role_restarted")
            if e.get("host") == "127.0.0.3"}
    assert lost <= back
    later = [e["learner/env_steps"] for e in read_events(run / "logs" / "learner-0.jsonl")
             if e.get("event") == "metrics"]
    assert later[-1] > steps[-1]  # training went on through the loss and the return


@pytest.mark.timeout(300)
def test_a_lost_registry_host_fails_the_job_naming_it(tmp_path, monkeypatch):
    proc, run, down = _start(tmp_path, monkeypatch, REGISTRY_AWAY,
                             "training.total_timesteps=10000000")
    try:
        wait_for(lambda: learner_training(run), 180, what="the job training")
        assert lose_host(down, "127.0.0.2")
        out, err = proc.communicate(timeout=120)  # it must not hang
    finally:
        kill_tree(proc)
    assert proc.returncode == 1
    assert "host 127.0.0.2" in err and "registry" in err, err[-2000:]
    assert json.loads((run / "summary.json").read_text())["lost_hosts"] == {
        "127.0.0.2": ["registry"]}
