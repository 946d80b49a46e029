"""Kubernetes manifests from a job: valid against the API's schemas offline, and
their containers' commands, run as local processes (tests/k8s_pods.py), train
CartPole to its target and end every Job."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests import k8s_pods
from tests.conftest import CONFIGS, free_port_range, launch, read_events

pytestmark = pytest.mark.e2e  # real processes

K8S_VERSION = "1.37.0"  # the newest schemas kubernetes-validate ships offline


def _write(tmp_path, config: str, *sets: str):
    out = tmp_path / "manifests"
    args = ["k8s", str(CONFIGS / config), "-o", str(out)]
    for s in sets:
        args += ["--set", s]
    r = launch(*args, timeout=60)
    return r, out


@pytest.mark.parametrize("config", ["cartpole_ppo.toml", "cartpole_dapo.toml",
                                    "cartpole_dqn.toml", "reverse_grpo.toml"])
def test_manifests_pass_offline_schema_validation(tmp_path, config):
    kv = pytest.importorskip("kubernetes_validate", reason="the test extra installs it")
    r, out = _write(tmp_path, config, "launch.k8s.volume=\"verl-runs\"",
                    "launch.k8s.node_selector={\"kubernetes.io/arch\"=\"amd64\"}",
                    "resources.learner.memory=\"4GB\"", "resources.learner.gpu=1")
    assert r.returncode == 0, r.stderr
    objs = k8s_pods.load(out)
    kinds = [o["kind"] for o in objs]
    assert kinds[:4] == ["ConfigMap", "Secret", "Service", "Deployment"]  # CURVE on
    for o in objs:
        kv.validate(o, K8S_VERSION, strict=True)
        assert o["metadata"]["labels"]["verl-zmq/run"].startswith("verl-")
    jobs = {o["metadata"]["name"].rsplit("-", 1)[1]: o for o in objs if o["kind"] == "Job"}
    assert all(j["spec"]["completionMode"] == "Indexed" for j in jobs.values())
    role = "peer" if "peer" in jobs else "learner"
    c = jobs[role]["spec"]["template"]["spec"]["containers"][0]
    if role == "learner":
        limits = c["resources"]["limits"]
        assert limits["memory"] == str(4 << 30) and limits["nvidia.com/gpu"] == "1"
    vols = jobs[role]["spec"]["template"]["spec"]["volumes"]
    assert {"name": "run", "persistentVolumeClaim": {"claimName": "verl-runs"}} in vols
    secret = next(v for v in vols if "secret" in v)["secret"]
    assert secret["defaultMode"] == 0o400
    assert "[algorithm.params]" in objs[0]["data"]["job.toml"]  # the resolved job


def test_a_misspelt_resource_exits_2_naming_the_key(tmp_path):
    r, out = _write(tmp_path, "cartpole_ppo.toml", 'resources.sampler.memory="2XB"')
    assert r.returncode == 2
    assert "resources.sampler.memory" in r.stderr and "2XB" in r.stderr
    assert not out.exists()


@pytest.mark.timeout(600)
def test_the_manifests_commands_run_cartpole_to_its_target(tmp_path):
    lo, hi = free_port_range()
    r, out = _write(tmp_path, "cartpole_ppo.toml", f"launch.port_range=[{lo}, {hi}]",
                    "evaluation.stop_at_return=475")
    assert r.returncode == 0, r.stderr
    pods = k8s_pods.pods(k8s_pods.load(out), tmp_path / "cluster")
    registry = [p for p in pods if p.owner.startswith("Deployment/")]
    jobs = [p for p in pods if p.owner.startswith("Job/")]
    assert len(registry) == 1 and len(jobs) == 7  # learner, shard, evaluator, 4 samplers
    for p in registry + jobs:
        k8s_pods.start(p)
    evaluator = next(p for p in jobs if "evaluator" in p.owner)
    aborted = False
    try:
        deadline = time.monotonic() + 480
        while time.monotonic() < deadline and any(p.proc.poll() is None for p in jobs):
            failed = k8s_pods.supervise(registry + jobs)  # restartPolicy, backoffLimit
            assert not failed, (failed[0].owner, failed[0].log.read_text()[-3000:])
            if not aborted and any(e.get("event") == "evaluated"
                                   for e in read_events(evaluator.log)):
                # a libzmq assertion ends a process so: the pod restarts, the job goes on
                os.kill(evaluator.proc.pid, signal.SIGABRT)
                aborted = True
            time.sleep(0.5)
        codes = {f"{p.owner}#{p.index}": p.proc.poll() for p in jobs}
        assert all(c == 0 for c in codes.values()), codes  # every Job completes
        assert aborted and evaluator.restarts >= 1
    finally:
        for p in registry + jobs:
            if p.proc.poll() is None:
                os.killpg(p.proc.pid, signal.SIGKILL)
            p.proc.wait(10)
    evals = [e for e in read_events(evaluator.log) if e.get("event") == "evaluated"]
    assert evals and max(e["eval/return_mean"] for e in evals) >= 475
    learner = next(p for p in jobs if "learner" in p.owner)
    started = [e for e in read_events(learner.log) if e.get("event") == "role_started"]
    assert started[0]["id"] == "learner-0" and started[0]["endpoints"]["params"].startswith(
        "tcp://127.0.0.1:")
