"""A pod runner for tests: the containers that Kubernetes manifests describe,
started as local processes with their command, arguments and environment as a
kubelet would give them (downward API values, an Indexed Job's completion
index, `$(VAR)` expansion), their volumes as local folders, and Service names
resolved to loopback; a pod that exits is restarted as its `restartPolicy` says
(Always; OnFailure while its Job's failures stay within `backoffLimit`, 6 by
default), as a kubelet and the Job controller would. What it proves is that the
manifests' commands work, not only their shape."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Pod:
    """One pod of a Deployment or a Job, as a local process."""

    owner: str  # "Deployment/name" or "Job/name"
    index: int
    argv: list[str]
    env: dict
    log: Path
    restart: str = "Never"  # the pod template's restartPolicy
    backoff_limit: int = 6  # a Job's; failures beyond it fail the Job
    proc: subprocess.Popen | None = None
    restarts: int = 0


def load(folder: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


def _volumes(objs: list[dict], root: Path) -> dict[str, Path]:
    """Each ConfigMap's and Secret's files in a folder of their own; the run folder."""
    out: dict[str, Path] = {}
    for o in objs:
        kind, name = o["kind"], o["metadata"]["name"]
        if kind == "ConfigMap":
            d = root / "configmaps" / name
            d.mkdir(parents=True)
            for k, v in o["data"].items():
                (d / k).write_text(v)
            out[f"configMap/{name}"] = d
        elif kind == "Secret":
            d = root / "secrets" / name
            d.mkdir(parents=True)
            for k, v in o.get("stringData", {}).items():
                fd = os.open(d / k, os.O_WRONLY | os.O_CREAT, 0o400)  # defaultMode 0400
                with os.fdopen(fd, "w") as f:
                    f.write(v)
            out[f"secret/{name}"] = d
    out["run"] = root / "run"
    out["run"].mkdir()
    return out


def _env(container: dict, index: int) -> dict:
    env = {}
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
            continue
        path = e["valueFrom"]["fieldRef"]["fieldPath"]
        if path == "status.podIP":
            env[e["name"]] = "127.0.0.1"
        elif "job-completion-index" in path:
            env[e["name"]] = str(index)
        else:
            raise AssertionError(f"the pod runner knows no field {path!r}")
    return env


def pods(objs: list[dict], root: Path) -> list[Pod]:
    """Every pod of the manifests (Deployments' replicas, Jobs' completions)."""
    vols = _volumes(objs, root)
    services = [o["metadata"]["name"] for o in objs if o["kind"] == "Service"]
    out = []
    for o in objs:
        if o["kind"] == "Deployment":
            count = o["spec"]["replicas"]
        elif o["kind"] == "Job":
            count = o["spec"]["completions"]
        else:
            continue
        spec = o["spec"]["template"]["spec"]
        restart = spec.get("restartPolicy", "Always")
        backoff = int(o["spec"].get("backoffLimit", 6)) if o["kind"] == "Job" else 0
        (c,) = spec["containers"]
        mounts = {}
        for v in spec["volumes"]:
            if "configMap" in v:
                mounts[v["name"]] = vols[f"configMap/{v['configMap']['name']}"]
            elif "secret" in v:
                mounts[v["name"]] = vols[f"secret/{v['secret']['secretName']}"]
            else:
                mounts[v["name"]] = vols["run"]
        for i in range(count):
            env = _env(c, i)
            argv = []
            by_length = sorted(c["volumeMounts"], key=lambda m: -len(m["mountPath"]))
            for a in c["args"]:
                a = re.sub(r"\$\((\w+)\)", lambda m, env=env: env[m.group(1)], a)
                for m in by_length:  # the deepest mount that holds the path
                    mp = m["mountPath"]
                    if a == mp or a.startswith(mp + "/"):
                        a = str(mounts[m["name"]]) + a[len(mp):]
                        break
                for svc in services:  # cluster DNS: the Service's name -> loopback
                    a = a.replace(f"tcp://{svc}:", "tcp://127.0.0.1:")
                argv.append(a)
            assert c["command"] == ["python"], c["command"]
            out.append(Pod(f"{o['kind']}/{o['metadata']['name']}", i, [sys.executable, *argv],
                           env, root / f"{o['metadata']['name']}-{i}.log", restart, backoff))
    return out


def start(pod: Pod) -> None:
    with open(pod.log, "ab") as f:  # a restarted container's log goes on
        pod.proc = subprocess.Popen(pod.argv, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT,
                                    env={**os.environ, **pod.env}, start_new_session=True)


def supervise(pods: list[Pod]) -> list[Pod]:
    """One kubelet pass: restart every exited pod its policy restarts; the pods
    that failed for good (a Job past its backoffLimit, or restartPolicy Never)."""
    failures: dict[str, int] = {}
    for p in pods:
        failures[p.owner] = failures.get(p.owner, 0) + p.restarts
    failed = []
    for p in pods:
        rc = p.proc.poll() if p.proc is not None else None
        if rc is None:
            continue
        again = p.restart == "Always" or (p.restart == "OnFailure" and rc != 0)
        if again and (p.owner.startswith("Deployment/") or failures[p.owner] < p.backoff_limit):
            p.restarts += 1
            failures[p.owner] += 1
            start(p)
        elif rc != 0:
            failed.append(p)
    return failed
