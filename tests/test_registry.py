"""Registry and discovery with real processes: a member killed with -9 is seen
leaving; a registry killed and restarted on the same endpoint gets every member
back, no member drops a live one meanwhile and one that died unseen is dropped
after the grace; a member with other versions is refused with a clear error."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import PY, ROOT, read_events, wait_for

pytestmark = pytest.mark.e2e  # real processes

HB, LIVENESS, SLACK = 0.5, 3, 4.0
BOUND = HB * LIVENESS + SLACK


def write_job(tmp: Path, lo: int, hi: int) -> Path:
    job = tmp / "job.toml"
    job.write_text(f"""
[experiment]
name = "registry-test"
[environment]
id = "CartPole-v1"
[algorithm]
name = "ppo"
[training]
total_timesteps = 1000
[launch]
port_range = [{lo}, {hi}]
heartbeat_interval_s = {HB}
heartbeat_liveness = {LIVENESS}
[logging]
interval_s = 1.0
""")
    return job


class Cluster:
    def __init__(self, tmp: Path, ports):
        self.tmp = tmp
        self.job = write_job(tmp, *ports)
        self.registry = f"tcp://127.0.0.1:{ports[0]}"
        self.procs: dict[str, subprocess.Popen] = {}

    def log(self, member: str) -> Path:
        return self.tmp / f"{member}.jsonl"

    def start(self, role: str, member: str) -> subprocess.Popen:
        return self.start_with_args(role, member, [])

    def start_with_args(self, role: str, member: str, extra: list[str]) -> subprocess.Popen:
        with open(self.tmp / f"{member}.err", "ab") as err:
            p = subprocess.Popen(
                [PY, "-m", "verl_zmq.cli", "role", role, "--job", str(self.job), "--registry",
                 self.registry, "--id", member, "--run-dir", str(self.tmp), "--log-file",
                 str(self.log(member)), *extra], cwd=ROOT, stdin=subprocess.DEVNULL,
                stderr=err)
        self.procs[member] = p
        return p

    def events(self, member: str, name: str) -> list[dict]:
        return [e for e in read_events(self.log(member)) if e.get("event") == name]

    def stop(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
            p.wait(10)


@pytest.fixture
def cluster(tmp_path, ports):
    c = Cluster(tmp_path, ports)
    yield c
    c.stop()


def _registry_members(c: Cluster, since: float) -> set[str]:
    return {e["member"] for e in c.events("registry", "member_joined") if e["ts"] >= since}


@pytest.mark.timeout(120)
def test_member_death_and_registry_restart(cluster):
    c = cluster
    c.start("registry", "registry")
    members = ["replay-0", "replay-1", "replay-2"]
    for m in members:
        c.start("replay", m)
    wait_for(lambda: _registry_members(c, 0) >= set(members), 30, what="all members registered")
    # each member's own view holds the others
    wait_for(lambda: all(c.events(m, "registered") for m in members), 10, what="registered")

    c.procs["replay-1"].send_signal(signal.SIGKILL)
    t_kill = time.time()

    def seen_leaving():
        return all(any(e.get("op") == "leave" and e.get("member") == "replay-1"
                       for e in c.events(m, "membership_changed"))
                   for m in ("replay-0", "replay-2"))

    wait_for(seen_leaving, BOUND, what="survivors seeing replay-1 leave")
    left = [e for e in c.events("replay-0", "membership_changed") if e.get("op") == "leave"]
    assert left[0]["ts"] - t_kill <= BOUND

    c.start("replay", "replay-3")
    wait_for(lambda: any(e.get("member") == "replay-3" for e in
                         c.events("replay-0", "membership_changed")), BOUND, what="replay-3 seen")
    c.procs["registry"].send_signal(signal.SIGKILL)
    c.procs["registry"].wait(5)
    c.procs["replay-3"].send_signal(signal.SIGKILL)  # dies while nobody is watching
    time.sleep(HB)  # members now talk to nobody
    t_new = time.time()
    c.start("registry", "registry")
    wait_for(lambda: _registry_members(c, t_new) >= {"replay-0", "replay-2"}, BOUND,
             what="members back in the new registry")
    assert "replay-1" not in _registry_members(c, t_new)

    def dropped(viewer: str) -> set[str]:
        return {m for e in c.events(viewer, "membership_changed") if e["ts"] >= t_new
                for m in ([e["member"]] if e.get("op") == "leave" else e.get("dropped", []))}

    # the member that died unseen is dropped once the re-registration grace is over...
    wait_for(lambda: "replay-3" in dropped("replay-0") and "replay-3" in dropped("replay-2"),
             BOUND + 2 * HB * LIVENESS, what="replay-3 dropped after the grace")
    # ...and no live member was ever dropped by a survivor: the restart cost no reconnect
    assert "replay-2" not in dropped("replay-0") and "replay-0" not in dropped("replay-2")
    for m in ("replay-0", "replay-2"):
        assert c.procs[m].poll() is None


@pytest.mark.timeout(60)
def test_version_mismatch_is_refused_in_both_logs(cluster, monkeypatch):
    c = cluster
    c.start("registry", "registry")
    # a member that reports another gymnasium: sitecustomize-free, via a wrapper module
    wrapper = c.tmp / "oldgym.py"
    wrapper.write_text(
        "import sys\nimport verl_zmq.comm.versions as v\n_orig = v.local_versions\n"
        "def fake():\n    d = _orig(); d['gymnasium'] = '0.0.1'; return d\n"
        "v.local_versions = fake\nimport verl_zmq.roles.membership as m\n"
        "m.local_versions = fake\nfrom verl_zmq.cli import main\nsys.exit(main())\n")
    with open(c.tmp / "replay-old.err", "ab") as err:
        p = subprocess.Popen([PY, str(wrapper), "role", "replay", "--job", str(c.job),
                              "--registry", c.registry, "--id", "replay-old", "--run-dir",
                              str(c.tmp), "--log-file", str(c.log("replay-old"))], cwd=ROOT,
                             env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=err)
    c.procs["replay-old"] = p
    try:
        rc = p.wait(30)
    except subprocess.TimeoutExpired:
        rc = None
    assert rc == 2, "\n".join(f"{n}: {(c.tmp / n).read_text()[-1500:]}" for n in (
        "registry.err", "registry.jsonl", "replay-old.err", "replay-old.jsonl")
        if (c.tmp / n).exists())
    refused = c.events("replay-old", "registration_refused")
    assert refused and "gymnasium 0.0.1 (member)" in refused[0]["error"]
    logged = c.events("registry", "member_refused")
    assert logged and logged[0]["member"] == "replay-old" and "gymnasium" in logged[0]["error"]
