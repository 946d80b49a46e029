"""A Ray cluster as the job's hosts (`verl-launch ray JOB`): the nodes become
hosts and the plan places roles on them; each role runs as an actor whose
driver pipes it like an SSH session; a node lost mid-run has its roles started
again on the head, and the job ends `done`. On a real two-node cluster
(`tools/hosts/ray_cluster.py`: `ray start` in two network namespaces)."""

from __future__ import annotations

import json
import subprocess

import pytest

from launcher.hosts import Host, HostsError
from launcher.plan import make_plan
from launcher.ray_target import ray_argv, ray_hosts
from tests.conftest import CONFIGS, PY, ROOT, read_events, sampler_sampling, wait_for
from tools.hosts.ray_cluster import RayCluster, unavailable
from verl_zmq.config import load_job


def _ray_hosts(cpus: tuple[int, ...] = (8, 4)) -> list[Host]:
    return [Host(address=f"10.9.0.{i + 1}", node=f"n{i}", slots=c, gpus=0, via="ray",
                 cluster="10.9.0.1:6379", line=i + 1) for i, c in enumerate(cpus)]


def test_ray_hosts_plan_spread_or_pack():
    job = load_job(CONFIGS / "cartpole_ppo.toml")
    spread = make_plan(job, _ray_hosts())
    samplers = [p.host for p in spread.placements if p.role == "sampler"]
    assert samplers == [0, 1, 0, 1]
    assert spread.registry_endpoint == "tcp://10.9.0.1:29500"
    pack = make_plan(load_job(CONFIGS / "cartpole_ppo.toml",
                              ["launch.ray.placement=pack"]), _ray_hosts())
    assert {p.host for p in pack.placements} == {0}  # 8 roles on the head's 8 CPUs


def test_a_role_runs_through_its_driver_with_its_resources():
    job = load_job(CONFIGS / "cartpole_ppo.toml", ['resources.learner.memory="1GB"'])
    hosts = _ray_hosts()
    plan = make_plan(job, hosts)
    learner = next(p for p in plan.placements if p.role == "learner")
    argv = ray_argv(job, hosts[learner.host], learner, ["python", "-m", "verl_zmq.cli"])
    assert argv[1:4] == ["-m", "launcher.ray_step", "run"]
    opts = dict(zip(argv[4:argv.index("--"):2], argv[5:argv.index("--"):2]))
    assert opts["--address"] == "10.9.0.1:6379" and opts["--node"] == "n0"
    assert opts["--memory"] == str(1 << 30) and opts["--cpus"] == "1"
    assert argv[argv.index("--") + 1:] == ["python", "-m", "verl_zmq.cli"]
    spare = ray_argv(job, hosts[0], learner, ["python"], standby=True)
    assert "--memory" not in spare and spare[spare.index("--cpus") + 1] == "0"


def test_an_unreachable_cluster_is_a_clear_error_at_once(ports):
    free_port = ports[0]  # nothing listens there
    # "Connection refused" is the launcher's own probe, not Ray's connect timeout
    with pytest.raises(HostsError, match=r"cannot reach the cluster at 127\.0\.0\.1:\d+: "
                                         r"Connection refused"):
        ray_hosts(f"ray:127.0.0.1:{free_port}")
    r = subprocess.run([PY, "-m", "launcher", "--ray", f"127.0.0.1:{free_port}",
                        str(CONFIGS / "cartpole_ppo.toml"), "--dry-run"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 2 and "ray start --head" in r.stderr


@pytest.fixture(scope="module")
def cluster():
    if why := unavailable():
        pytest.fail(f"a Ray cluster cannot be made here: {why}")
    with RayCluster(workers=1, cpus=[8, 4]) as c:
        yield c


@pytest.mark.e2e
@pytest.mark.timeout(420)
def test_a_job_on_two_ray_nodes_survives_losing_one(cluster, tmp_path):
    run = tmp_path / "run"
    argv = [PY, "-m", "launcher", cluster.spec, str(CONFIGS / "cartpole_ppo.toml"),
            "--run-dir", str(run)]
    dry = subprocess.run([*cluster.wrap(0), *argv, "--dry-run"], capture_output=True,
                         text=True, cwd=ROOT, timeout=180)
    assert dry.returncode == 0, dry.stderr
    assert "launcher.ray_step run" in dry.stdout
    rows = [ln.split() for ln in dry.stdout.splitlines() if ln.startswith("sampler-")]
    on_worker = sorted(r[0] for r in rows if r[3] == cluster.addresses[1])
    assert on_worker == ["sampler-1", "sampler-3"], dry.stdout
    out = open(tmp_path / "launcher.out", "w")  # noqa: SIM115
    proc = subprocess.Popen([*cluster.wrap(0), *argv], stdout=out, stderr=subprocess.STDOUT,
                            cwd=ROOT)
    try:
        # the worker's samplers step their envs there (the job cannot end before its
        # learner trains on what they ship)
        wait_for(lambda: all(sampler_sampling(run, m) for m in on_worker), timeout=240,
                 what="the samplers on the worker node sampling")
        cluster.lose(1)
        rc = proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
        out.close()
    text = (tmp_path / "launcher.out").read_text()
    assert rc == 0, text[-3000:]
    events = read_events(run / "logs" / "launcher.jsonl")
    moved = {e["member"]: e["host"] for e in events if e.get("event") == "role_moved"}
    assert moved == {m: cluster.addresses[0] for m in on_worker}, text[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "done"
    assert "Ray node 10.77.1.2 failed: sampler-1 restarted on 10.77.0.1" in text
