"""Kubernetes manifests for a job (`verl-launch k8s JOB -o DIR [--apply]`).

What is written (JSON, one object a file, `kubectl apply -f DIR` takes them all):

- the resolved job as a ConfigMap, mounted read-only at /etc/verl; with CURVE
  (on by default off one machine) the job's keys as a Secret, mounted read-only
  with mode 0400 at /etc/verl-keys;
- the registry: a one-replica Deployment (it comes back after a crash, on a
  new pod IP) behind a Service at the job's fixed port, so every role finds it
  by DNS name;
- every other role as an Indexed Job, one per role, one completion per member:
  members have identities (ids, groups, DAPO's per-peer groups, data-parallel
  ranks) that the job file fixes, and a completion index is exactly such an
  identity (`verl role --member-index`); `restartPolicy: OnFailure` restarts a
  crashed role in place, as the launcher would, up to `launch.max_restarts`;
  the job's end (the evaluator's shutdown) makes every role exit 0, so every
  Job completes and, after `launch.k8s.ttl_s`, is deleted with its pods;
- each role binds on its pod IP (downward API) and advertises it in the
  registry; logs go to stdout (`kubectl logs`); the run folder is a
  PersistentVolumeClaim when `launch.k8s.volume` names one, else each pod's own
  emptyDir; `resources.<role>` become requests and limits (`gpu` as
  `nvidia.com/gpu`).

The registry's Deployment outlives the job: every object carries the label
`verl-zmq/run=<name>`, and `kubectl delete deployment,service,job,configmap,secret
-l verl-zmq/run=<name>` removes them all.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from verl_zmq.config import Job, dumps_job
from verl_zmq.config.checks import memory_bytes
from verl_zmq.config.members import default_specs
from verl_zmq.config.roles import REGISTRY, role_traits

JOB_DIR, KEYS_DIR, RUN_DIR = "/etc/verl", "/etc/verl-keys", "/var/lib/verl/run"
WORKDIR = "/opt/verl-zmq"


def k8s_name(job: Job) -> str:
    """A DNS-1123 name for the job's objects, from `experiment.name`."""
    name = re.sub(r"[^a-z0-9-]+", "-", job.experiment.name.lower()).strip("-") or "job"
    return f"verl-{name}"[:40].rstrip("-")


def _labels(name: str, role: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "verl-zmq", "app.kubernetes.io/component": role,
            "verl-zmq/run": name}


def _resources(job: Job, role: str) -> dict[str, Any]:
    res = getattr(job.resources, role, None)
    if res is None:
        return {}
    req: dict[str, str] = {}
    lim: dict[str, str] = {}
    if res.cpu:
        req["cpu"] = lim["cpu"] = str(res.cpu)
    if res.memory:
        req["memory"] = lim["memory"] = str(memory_bytes(res.memory))
    if res.gpu:
        lim["nvidia.com/gpu"] = str(res.gpu)
    return {k: v for k, v in (("requests", req), ("limits", lim)) if v}


def _container(job: Job, name: str, role: str, curve: bool) -> dict[str, Any]:
    port = job.registry_port
    args = ["-m", "verl_zmq.cli", "role", role, "--job", f"{JOB_DIR}/job.toml",
            "--registry", f"tcp://{name}-registry:{port}", "--bind", "$(POD_IP)",
            "--run-dir", RUN_DIR]
    index_env = []
    if role_traits(role).numbered:  # an Indexed Job's completion index names the member
        args += ["--member-index", "$(JOB_COMPLETION_INDEX)"]
        index_env = [{"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
            "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}}]
    if curve:
        args += ["--keys", f"{KEYS_DIR}/keys.json"]
    mounts = [{"name": "job", "mountPath": JOB_DIR, "readOnly": True},
              {"name": "run", "mountPath": RUN_DIR}]
    if curve:
        mounts.append({"name": "keys", "mountPath": KEYS_DIR, "readOnly": True})
    c: dict[str, Any] = {"name": role, "image": job.launch.k8s.image,
         "imagePullPolicy": job.launch.k8s.pull_policy, "workingDir": WORKDIR,
         "command": ["python"], "args": args,
         "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                 {"name": "PYTHONUNBUFFERED", "value": "1"}, *index_env],
         "volumeMounts": mounts}
    if role_traits(role).rendezvous:
        c["ports"] = [{"name": "registry", "containerPort": port}]
    res = _resources(job, role)
    if res:
        c["resources"] = res
    return c


def _pod(job: Job, name: str, role: str, curve: bool, restart: str) -> dict[str, Any]:
    K = job.launch.k8s
    volumes = [{"name": "job", "configMap": {"name": f"{name}-job"}},
               {"name": "run", **({"persistentVolumeClaim": {"claimName": K.volume}}
                                  if K.volume else {"emptyDir": {}})}]
    if curve:
        volumes.append({"name": "keys", "secret": {"secretName": f"{name}-curve",
                                                   "defaultMode": 0o400}})
    spec: dict[str, Any] = {"restartPolicy": restart,
                            "containers": [_container(job, name, role, curve)],
                            "volumes": volumes}
    if K.service_account:
        spec["serviceAccountName"] = K.service_account
    if K.node_selector:
        spec["nodeSelector"] = {str(k): str(v) for k, v in K.node_selector.items()}
    return {"metadata": {"labels": _labels(name, role)}, "spec": spec}


def _meta(job: Job, name: str, obj: str, role: str) -> dict[str, Any]:
    return {"name": obj, "namespace": job.launch.k8s.namespace, "labels": _labels(name, role)}


def manifests(job: Job, keys: dict[str, str] | None) -> list[dict[str, Any]]:
    """Every object of the job, in the order to apply them."""
    name = k8s_name(job)
    curve = keys is not None
    out: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(job, name, f"{name}-job",
                                                                   "job"),
         "data": {"job.toml": dumps_job(job)}}]
    if curve:
        out.append({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                    "metadata": _meta(job, name, f"{name}-curve", "keys"),
                    "stringData": {"keys.json": json.dumps(keys)}})
    sel = _labels(name, REGISTRY)
    out.append({"apiVersion": "v1", "kind": "Service",
                "metadata": _meta(job, name, f"{name}-registry", REGISTRY),
                "spec": {"selector": sel, "ports": [{"name": "registry", "protocol": "TCP",
                                                     "port": job.registry_port,
                                                     "targetPort": job.registry_port}]}})
    out.append({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": _meta(job, name, f"{name}-registry", REGISTRY),
                "spec": {"replicas": 1, "selector": {"matchLabels": sel},
                         "template": _pod(job, name, REGISTRY, curve, "Always")}})
    counts: dict[str, int] = {}
    for s in default_specs(job):
        if role_traits(s.role).numbered:  # the registry is a Deployment
            counts[s.role] = counts.get(s.role, 0) + 1
    L = job.launch
    for role, n in counts.items():
        spec = {"completionMode": "Indexed", "completions": n, "parallelism": n,
                "backoffLimit": n * L.max_restarts_per_role.get(role, L.max_restarts),
                "template": _pod(job, name, role, curve, "OnFailure")}
        if L.k8s.ttl_s:
            spec["ttlSecondsAfterFinished"] = L.k8s.ttl_s
        out.append({"apiVersion": "batch/v1", "kind": "Job",
                    "metadata": _meta(job, name, f"{name}-{role}", role), "spec": spec})
    return out


def write(objs: list[dict[str, Any]], out: Path) -> list[Path]:
    """One JSON file per object, numbered in apply order."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, o in enumerate(objs):
        p = out / f"{i:02d}-{o['kind'].lower()}-{o['metadata']['name']}.json"
        p.write_text(json.dumps(o, indent=2) + "\n")
        paths.append(p)
    return paths
