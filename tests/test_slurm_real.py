"""A real Slurm cluster (`tools/hosts/slurm_cluster.py`: munged, slurmctld and
three slurmd on namespace hosts): `sbatch` runs `verl-launch slurm` inside the
allocation, its roles run as job steps on all three nodes and CartPole reaches
its target; a role's step killed with `scancel --signal=KILL JOB.STEP` comes
back as a new step; `scancel JOB` ends every step and leaves no process on any
node; a node lost mid-run (`sbatch --no-kill`) has its roles started again on
the others, and the job reaches its target (its evaluator held still meanwhile,
so that the target cannot come first)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time

import pytest

from tests.conftest import CONFIGS, PY, ROOT, read_events, wait_for
from tools.hosts.slurm_cluster import SlurmCluster, unavailable

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(bool(unavailable()), reason=unavailable() or "-")]

CPUS = 4  # per node: the job's eight roles fit on two of the three nodes


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with SlurmCluster(tmp_path_factory.mktemp("slurm"), nodes=3, cpus=CPUS) as c:
        yield c


def _script(tmp_path, run, *sets: str) -> object:
    argv = [PY, "-m", "launcher.cli", "slurm", str(CONFIGS / "cartpole_ppo.toml"),
            "--run-dir", str(run), "--set", "launch.port_range=[29500, 29599]"]
    for s in sets:
        argv += ["--set", s]
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n" + " ".join(f"'{a}'" for a in argv) + "\n")
    return script


def _submit(cluster, tmp_path, run, sets: tuple[str, ...] = (), nodes: int = 3,
            tasks: int = CPUS, *opts: str) -> int:
    """sbatch the job script on `nodes` nodes of `tasks` tasks each, from the checkout."""
    return cluster.sbatch(_script(tmp_path, run, *sets), "-N", str(nodes),
                          f"--ntasks-per-node={tasks}", *opts, f"--chdir={ROOT}",
                          f"--output={tmp_path}/out.txt")


def _steps(cluster, job: int) -> dict[str, tuple[str, str]]:
    """Running steps of `job`: step name -> (step id, node)."""
    out = {}
    for line in cluster.steps(job).splitlines()[1:]:
        parts = line.split()
        if len(parts) == 3:
            out[parts[1]] = (parts[0], parts[2])
    return out


def _finished(cluster, job: int) -> bool:
    return cluster.job_state(job) not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING")


@pytest.mark.timeout(600)
def test_a_batch_job_runs_its_roles_as_steps_on_every_node(cluster, tmp_path):
    run = tmp_path / "run"
    job = _submit(cluster, tmp_path, run, ("evaluation.stop_at_return=475",))
    seen: dict[str, str] = {}
    listing = ""

    def done():
        nonlocal listing
        steps = _steps(cluster, job)
        if len(steps) > len(seen):
            listing = cluster.steps(job)
        seen.update({name: node for name, (_, node) in steps.items()})
        return _finished(cluster, job)

    wait_for(done, 480, every=1.0, what="the batch job's end")
    out = (tmp_path / "out.txt").read_text()
    assert cluster.job_state(job) == "COMPLETED", out[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "done" and summary["best_eval_return"] >= 475, summary
    assert {"verl-registry", "verl-learner-0", "verl-replay-0", "verl-sampler-0"} <= set(seen), \
        listing
    assert set(seen.values()) == {"n0", "n1", "n2"}, listing
    print(listing)


@pytest.mark.timeout(600)
def test_a_killed_step_comes_back_and_scancel_ends_every_step(cluster, tmp_path):
    run = tmp_path / "run"
    job = _submit(cluster, tmp_path, run, ("training.total_timesteps=100000000",))
    try:
        wait_for(lambda: "verl-sampler-1" in _steps(cluster, job)
                 and (run / "logs" / "learner-0.jsonl").exists()
                 and any(e.get("event") == "first_update"
                         for e in read_events(run / "logs" / "learner-0.jsonl")),
                 240, every=1.0, what="the job training")
        step, _ = _steps(cluster, job)["verl-sampler-1"]
        r = cluster.run(["scancel", "--signal=KILL", step], timeout=30)
        assert r.returncode == 0, r.stderr
        wait_for(lambda: _steps(cluster, job).get("verl-sampler-1", (step,))[0] != step,
                 120, every=1.0, what="the sampler back as a new step")
        restarted = [e for e in read_events(run / "logs" / "launcher.jsonl")
                     if e.get("event") == "role_restarted" and e["member"] == "sampler-1"]
        assert restarted
    finally:
        cluster.run(["scancel", str(job)], timeout=30)
    wait_for(lambda: _finished(cluster, job), 120, every=1.0, what="the job cancelled")
    time.sleep(2)  # slurmstepd reaps its tasks
    left = {i: [p for p in cluster.lab.strays(i) if "slurmd" not in p and "slurmctld" not in p]
            for i in range(3)}
    assert not any(left.values()), left


@pytest.mark.timeout(300)
def test_an_allocation_too_small_fails_at_once_naming_the_shortfall(cluster, tmp_path):
    run = tmp_path / "run"
    job = _submit(cluster, tmp_path, run, (), 1, 2)
    wait_for(lambda: _finished(cluster, job), 120, every=0.5, what="the batch job's end")
    out = (tmp_path / "out.txt").read_text()
    assert cluster.job_state(job) == "FAILED", out
    # refused before anything started: no run folder, no step
    assert not run.exists() and "Traceback" not in out, out
    print(out)
    assert "the Slurm allocation has 2 CPUs (1 node(s) x 2), the job's roles need 8" in out, out


@pytest.mark.timeout(300)
def test_a_launcher_killed_in_an_allocation_leaves_no_process(cluster, tmp_path):
    """SIGKILL to the launcher alone (the batch step's process, not its steps): every
    role sees its stdin close and ends, on every node."""
    run = tmp_path / "run"
    job = _submit(cluster, tmp_path, run, ("training.total_timesteps=100000000",))
    try:
        log = run / "logs" / "learner-0.jsonl"
        wait_for(lambda: log.exists() and any(e.get("event") == "first_update"
                                              for e in read_events(log)),
                 240, every=1.0, what="the job training")
        pid = read_events(run / "logs" / "launcher.jsonl")[0]["pid"]
        os.kill(pid, signal.SIGKILL)

        def roles_left():
            return {i: [p for p in cluster.lab.strays(i) if "verl_zmq" in p or "srun" in p]
                    for i in range(3)}
        wait_for(lambda: not any(roles_left().values()), 60, every=1.0,
                 what=f"no role left (still: {roles_left()})")
    finally:
        cluster.run(["scancel", str(job)], timeout=30)


@pytest.mark.timeout(600)
def test_a_lost_node_has_its_roles_replaced_and_the_job_reaches_its_target(cluster, tmp_path):
    run = tmp_path / "run"
    job = _submit(cluster, tmp_path, run, ("evaluation.stop_at_return=475",
                                           "training.total_timesteps=100000000"), 3, CPUS,
                  "--no-kill")
    evaluator = None
    try:
        # The evaluator ends the job at the target: held still from its first line (it
        # has not evaluated) until every role of the lost node has moved, so that the
        # job cannot end first however fast it learns.
        log = run / "logs" / "evaluator-0.jsonl"
        wait_for(lambda: log.exists() and read_events(log), 240, every=0.05,
                 what="the evaluator's first line")
        evaluator = read_events(log)[0]["pid"]
        os.kill(evaluator, signal.SIGSTOP)
        wait_for(lambda: len(_steps(cluster, job)) >= 9, 240, every=1.0, what="every step")
        on_n2 = sorted(name for name, (_, node) in _steps(cluster, job).items() if node == "n2")
        assert on_n2 and "verl-evaluator-0" not in on_n2, cluster.steps(job)
        cluster.lose(2)
        launched = run / "logs" / "launcher.jsonl"
        wait_for(lambda: {e["member"] for e in read_events(launched)
                          if e.get("event") == "role_moved"} >= {n.removeprefix("verl-")
                                                                 for n in on_n2},
                 240, every=1.0, what="every role of n2 moved")
        os.kill(evaluator, signal.SIGCONT)
        wait_for(lambda: _finished(cluster, job), 480, every=1.0, what="the batch job's end")
    finally:
        if evaluator is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(evaluator, signal.SIGCONT)
        cluster.run(["scancel", str(job)], timeout=30)  # the last test: n2 stays lost
    out = (tmp_path / "out.txt").read_text()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["best_eval_return"] >= 475, out[-3000:]
    launcher = read_events(run / "logs" / "launcher.jsonl")
    lost = {e["member"] for e in launcher if e.get("event") == "host_lost"}
    moved = {e["member"]: e["node"] for e in launcher if e.get("event") == "role_moved"}
    assert lost == {n.removeprefix("verl-") for n in on_n2}, (lost, on_n2, out[-3000:])
    # once each: a moved role ending with the job is not another node failure
    assert sum(e.get("event") == "host_lost" for e in launcher) == len(lost), out[-3000:]
    assert summary["status"] == "done" and cluster.job_state(job) == "COMPLETED", out[-3000:]
    assert set(moved) == lost and set(moved.values()) <= {"n0", "n1"}, moved
    assert "restarted on n" in out  # said on the terminal
