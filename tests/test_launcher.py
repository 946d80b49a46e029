"""The launcher's pure parts: hosts files, Slurm node lists, placement, dry runs,
and bad input ending with exit code 2 before anything starts."""

from __future__ import annotations

import pytest

from launcher.hosts import Host, HostsError, expand_nodelist, parse_hosts, slurm_hosts
from launcher.plan import make_plan
from tests.conftest import CONFIGS, DATA, launch
from verl_zmq.config import load_job


def test_hosts_file_parsing():
    hosts = parse_hosts("""
        # a comment
        localhost slots=4 roles=registry,learner,replay,evaluator
        alice@127.0.0.2:2222 slots=8 roles=sampler python=/opt/py/bin/python  # trailing
        127.0.0.3 workdir=/srv/verl
    """, "h.txt")
    assert [h.address for h in hosts] == ["localhost", "127.0.0.2", "127.0.0.3"]
    a = hosts[1]
    assert (a.user, a.port, a.slots, a.roles, a.python) == \
        ("alice", 2222, 8, ("sampler",), "/opt/py/bin/python")
    assert hosts[0].is_local and not a.is_local and not hosts[2].is_local
    assert a.ssh_target == "alice@127.0.0.2" and hosts[2].workdir == "/srv/verl"
    assert hosts[1].line == 4  # the text starts with an empty line


BAD_HOSTS = {
    "unknown_option.txt": "unknown_option.txt:1: unknown option 'colour'",
    "bad_port.txt": "bad_port.txt:1: port '99999'",
    "unknown_role.txt": "unknown role 'learnr'",
    "empty.txt": "no hosts",
    "bad_slots.txt": "slots='zero'",
    "bad_address.txt": "is not [user@]host[:port]",
    "empty_roles.txt": "is not key=value",
    "option_without_value.txt": "option 'python' is not key=value",
    "port_not_number.txt": "port 'ssh'",
    "no_host_for_registry.txt": "cannot place registry: no host allows it",
}


def test_bad_hosts_corpus_is_complete():
    assert set(BAD_HOSTS) == {p.name for p in (DATA / "bad_hosts").glob("*.txt")}


@pytest.mark.e2e
@pytest.mark.parametrize("name", sorted(BAD_HOSTS))
def test_bad_hosts_file_exits_2_before_starting(name, tmp_path):
    r = launch(str(DATA / "bad_hosts" / name), str(CONFIGS / "cartpole_ppo.toml"),
               "--run-dir", str(tmp_path / "run"), timeout=60)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    assert BAD_HOSTS[name] in r.stderr, r.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.e2e
def test_unreachable_ssh_host_is_reported_before_any_role_starts(tmp_path, ports):
    # a loopback address where no sshd listens on that port
    hosts = tmp_path / "hosts.txt"
    hosts.write_text(f"localhost\n127.0.0.9:{ports[0]} roles=sampler\n")
    r = launch(str(hosts), str(CONFIGS / "cartpole_ppo.toml"), "--run-dir",
               str(tmp_path / "run"), timeout=60)
    assert r.returncode == 2, r.stderr
    assert "127.0.0.9" in r.stderr and "unreachable by SSH" in r.stderr
    assert not (tmp_path / "run" / "logs").exists()


def test_slurm_nodelist_expansion():
    assert expand_nodelist("node[01-03]") == ["node01", "node02", "node03"]
    assert expand_nodelist("gpu[1-2,7],cpu5,x[08-10]") == \
        ["gpu1", "gpu2", "gpu7", "cpu5", "x08", "x09", "x10"]
    hosts = slurm_hosts({"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_NTASKS_PER_NODE": "4(x2)"})
    assert [(h.address, h.slots) for h in hosts] == [("n1", 4), ("n2", 4)]
    with pytest.raises(HostsError, match="SLURM_JOB_NODELIST is not set"):
        slurm_hosts({})


def test_plan_spreads_samplers_and_puts_registry_first():
    job = load_job(CONFIGS / "cartpole_ppo.toml")
    hosts = [Host("127.0.0.2", roles=("registry", "learner", "replay", "evaluator")),
             Host("127.0.0.3"), Host("127.0.0.4")]
    plan = make_plan(job, hosts)
    assert plan.placements[0].role == "registry" and plan.placements[0].host == 0
    samplers = [p.host for p in plan.placements if p.role == "sampler"]
    assert samplers == [1, 2, 1, 2]
    shard = next(p for p in plan.placements if p.role == "replay")
    learner = next(p for p in plan.placements if p.role == "learner")
    assert shard.host == learner.host
    assert plan.registry_endpoint == f"tcp://127.0.0.2:{job.registry_port}"


def test_each_peer_takes_a_host_with_its_samplers_and_shard():
    # a machine per peer: peers spread, and each group's samplers and shard follow it
    job = load_job(CONFIGS / "cartpole_dapo.toml")
    hosts = [Host("127.0.0.2", roles=("registry", "evaluator")),
             *(Host(f"127.0.0.{3 + i}", roles=("peer", "sampler", "replay")) for i in range(4))]
    plan = make_plan(job, hosts)
    by_group: dict[str, set[int]] = {}
    for p in plan.placements:
        if p.role in ("peer", "sampler", "replay"):
            by_group.setdefault(p.group, set()).add(p.host)
    assert sorted(by_group.values(), key=min) == [{1}, {2}, {3}, {4}]
    # a host without room for a peer's sampler: the sampler spreads as before
    hosts[1] = Host("127.0.0.3", roles=("peer", "replay"))
    plan = make_plan(job, hosts)
    s0 = next(p for p in plan.placements if p.member_id == "sampler-0")
    assert s0.host != 1 and s0.host in (2, 3, 4)


def test_slots_bound_placement():
    job = load_job(CONFIGS / "cartpole_ppo.toml")  # learner and samplers take cpu=1 each
    with pytest.raises(HostsError, match="full"):
        make_plan(job, [Host("localhost", slots=3)])


@pytest.mark.e2e
def test_dry_run_prints_plan_and_commands_and_starts_nothing(tmp_path):
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("127.0.0.2 roles=registry,learner,replay,evaluator\n127.0.0.3\n127.0.0.4\n")
    r = launch("--dry-run", str(hosts), str(CONFIGS / "cartpole_ppo.toml"), "--run-dir",
               str(tmp_path / "run"), timeout=60)
    assert r.returncode == 0, r.stderr
    assert "sampler-3" in r.stdout and "ssh -o BatchMode=yes" in r.stdout
    assert "--exit-on-stdin-eof" in r.stdout and "--job -" in r.stdout
    assert not (tmp_path / "run").exists()


@pytest.mark.e2e
def test_dry_run_slurm(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_NODELIST", "node[01-03]")
    r = launch("--dry-run", "slurm", str(CONFIGS / "cartpole_ppo.toml"), timeout=60)
    assert r.returncode == 0, r.stderr
    for n in ("node01", "node02", "node03"):
        assert n in r.stdout


@pytest.mark.e2e
def test_launcher_refuses_a_bad_env_before_starting_any_role(tmp_path):
    r = launch("local", str(DATA / "bad_envs" / "bad_env_id.toml"), "--run-dir",
               str(tmp_path / "run"), timeout=120)
    assert r.returncode == 2, r.stderr
    assert "closest registered ids: CartPole-v1" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "run" / "logs").exists()


@pytest.mark.e2e
def test_launcher_refuses_a_used_run_folder_without_resume(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "plan.json").write_text("{}")
    r = launch("local", str(CONFIGS / "cartpole_ppo.toml"), "--run-dir", str(run), timeout=60)
    assert r.returncode == 2 and "--resume" in r.stderr, r.stderr
    assert not (run / "logs").exists()
    r = launch("local", str(CONFIGS / "cartpole_ppo.toml"), "--resume", str(tmp_path / "none"),
               timeout=60)
    assert r.returncode == 2 and "no plan.json" in r.stderr, r.stderr


def test_restart_policy_backs_off_gives_up_and_forgives_a_long_run(tmp_path):
    from launcher.fate import restart_delay
    from launcher.plan import Placement
    from launcher.remote import RoleProcess

    job = load_job(CONFIGS / "cartpole_ppo.toml", overrides=[
        "launch.max_restarts=3", "launch.restart_backoff_s=1", "launch.restart_window_s=100",
        "launch.max_restarts_per_role={sampler = 1}"])
    L = job.launch
    rp = RoleProcess(Placement("learner-0", "learner", "main", 0), [], b"",
                     tmp_path / "l.jsonl", tmp_path / "l.err")
    # a crash loop: at once (a warm spare may take over), then 1, 2 s, then it fails for good
    assert [restart_delay(L, rp, 1, rp.started_at + 5) for _ in range(4)] == [0, 1, 2, None]
    assert rp.restarts == 3
    # up for the window since its last start: the budget and the backoff start afresh
    rp.started_at = 1000.0
    assert restart_delay(L, rp, 1, 1000.0 + 100) == 0
    assert restart_delay(L, rp, -9, 1000.0 + 1) == 1 and rp.restarts == 5
    # exit 2 is bad input: never restarted; a per-role budget overrides the global one
    assert restart_delay(L, RoleProcess(rp.placement, [], b"", rp.log_path, rp.err_path),
                         2, 0.0) is None
    s = RoleProcess(Placement("sampler-0", "sampler", "main", 0), [], b"", rp.log_path,
                    rp.err_path)
    assert [restart_delay(L, s, 1, 1.0) for _ in range(2)] == [0, None]
    # the delay is capped however large the budget
    big = load_job(CONFIGS / "cartpole_ppo.toml", overrides=["launch.max_restarts=20"]).launch
    fresh = RoleProcess(rp.placement, [], b"", rp.log_path, rp.err_path)
    assert max(restart_delay(big, fresh, 1, 0.0) for _ in range(20)) == 60.0
    # a trainer that updated since each start was taken over, not crash-looping: each
    # of its restarts is at once, however many, and none spends its budget
    took = RoleProcess(rp.placement, [], b"", rp.log_path, rp.err_path)
    assert [restart_delay(L, took, -9, 5.0, worked=True) for _ in range(6)] == [0] * 6
    assert took.restarts == 6 and restart_delay(L, took, -9, 5.0) == 1


def test_a_restarted_role_reads_only_its_own_stderr(tmp_path):
    """A step moved off a failed node keeps its stderr file, which ends with srun's
    "Node failure on": the incarnation on the new node, ending, must not be taken
    for another node failure (nor be blamed on the old one's last words)."""
    import asyncio

    from launcher.lost import NODE_FAILURE
    from launcher.plan import Placement
    from launcher.remote import RoleProcess

    err = tmp_path / "s.err"
    err.write_text(f"{NODE_FAILURE} n2\nsrun: forcing job termination\n")
    rp = RoleProcess(Placement("sampler-1", "sampler", "main", 0),
                     ["sh", "-c", "cat >/dev/null; echo ended well >&2"], b"",
                     tmp_path / "s.jsonl", err)

    async def once() -> str:
        await rp.start()
        rp.proc.stdin.close()
        await rp.proc.wait()
        return rp.err_tail(5)

    assert asyncio.run(once()) == "ended well"
    assert NODE_FAILURE in err.read_text()  # the file keeps what came before


@pytest.mark.e2e
def test_a_warm_spare_let_go_unused_exits_quietly():
    """A spare whose stdin closes before a job arrives (the job ended, the launcher
    is gone) exits 0 and writes nothing."""
    import subprocess

    from tests.conftest import PY, ROOT

    r = subprocess.run([PY, "-m", "verl_zmq.cli", "role", "learner", "--job", "-",
                        "--registry", "tcp://127.0.0.1:1", "--exit-on-stdin-eof", "--standby"],
                       cwd=ROOT, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and not r.stdout and not r.stderr, (r.returncode, r.stderr)


def test_a_spare_whose_job_comes_first_is_not_left_idle():
    """The job (here: the end of stdin) arriving before the spare's main thread has
    gone idle leaves it at normal priority: idle behind busy cores it would not run
    again (a takeover stuck, or a spare that never exits)."""
    import os
    import subprocess

    from tests.conftest import PY, ROOT

    if os.geteuid() != 0:
        pytest.skip("going idle and back needs root, as CI has")
    code = (
        "import os, threading\n"
        "from verl_zmq import runner\n"
        "import verl_zmq.roles.base as base\n"
        "start = threading.Thread.start\n"
        "def start_and_finish(self):  # the watcher runs to its end first\n"
        "    start(self)\n"
        "    self.join()\n"
        "threading.Thread.start = start_and_finish\n"
        "base.role_class = lambda role: type('R', (), {'preload': staticmethod(lambda: None)})\n"
        "print(runner.standby('learner'), os.sched_getscheduler(0) == os.SCHED_OTHER)\n")
    r = subprocess.run([PY, "-c", code], cwd=ROOT, stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=120)
    assert r.stdout.split() == ["False", "True"], (r.stdout, r.stderr[-2000:])


def test_resume_auto_picks_the_newest_checkpointed_run_of_the_job(tmp_path, capsys):
    import os

    from launcher.launch import auto_resume

    job = tmp_path / "job.toml"
    job.write_text((CONFIGS / "cartpole_ppo.toml").read_text())
    runs = tmp_path / "runs"
    sets = [f"experiment.runs_dir={runs}"]
    assert auto_resume(str(job), sets, "auto", None) is None  # nothing yet: a new run
    assert "a new one" in capsys.readouterr().err
    for i, (stamp, checkpointed) in enumerate((("20261201-000000", True),
                                               ("20261202-000000", True),
                                               ("20261203-000000", False))):
        rd = runs / "cartpole_ppo" / stamp
        (rd / "checkpoints").mkdir(parents=True)
        (rd / "plan.json").write_text("{}")
        if checkpointed:
            (rd / "checkpoints" / "latest.pt").write_bytes(b"")
        os.utime(rd, (1_000_000 + i, 1_000_000 + i))
    newest = runs / "cartpole_ppo" / "20261202-000000"  # the newest never checkpointed
    assert auto_resume(str(job), sets, "auto", None) == str(newest)
    assert f"continuing {newest}" in capsys.readouterr().err
    # the job key does the same; without it, and with --run-dir, a launch starts anew
    assert auto_resume(str(job), [*sets, "experiment.resume_mode=\"auto\""], None,
                       None) == str(newest)
    assert auto_resume(str(job), sets, None, None) is None
    assert auto_resume(str(job), [*sets, "experiment.resume_mode=\"auto\""], None,
                       str(tmp_path / "mine")) is None
