"""A Ray cluster as the job's hosts (`verl-launch ray JOB`, `ray:ADDRESS`, or
`--ray ADDRESS`): each live node is a host (its CPUs are its slots, its GPUs
its GPUs), the head first, so the plan places roles on nodes as on any hosts.
Each role then starts as `python -m launcher.ray_step run ... -- <verl role
...>`, a small Ray driver on this machine that places the role's actor on its
planned node (soft affinity: a lost node's roles land where Ray has room) and
pipes the role's input, output and exit code, as ssh does for a host.
`launcher.ray_step` imports Ray; the launcher itself never does."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

from verl_zmq.config import Job

from .hosts import Host, HostsError
from .plan import Placement

NODES_TIMEOUT_S = 60.0


def is_ray(spec: str) -> bool:
    """Whether HOSTS names a Ray cluster: `ray` or `ray:ADDRESS`."""
    return spec == "ray" or spec.startswith("ray:")


def ray_address(spec: str) -> str:
    """`ray` (RAY_ADDRESS, else Ray's own `auto`: the cluster this machine is part
    of) or `ray:ADDRESS`."""
    address = spec.partition(":")[2]
    return address or os.environ.get("RAY_ADDRESS", "") or "auto"


def _unreachable(address: str, timeout_s: float = 5.0) -> str:
    """Why nothing answers at HOST:PORT, or empty (`auto` and Ray's own address
    forms are left to Ray): a refused port fails at once, not after Ray's minute."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "://" in address:
        return ""
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as e:
        return e.strerror or str(e)
    return ""


def ray_hosts(spec: str) -> list[Host]:
    """The cluster's live nodes as hosts, the head first; HostsError when Ray is
    not installed or the cluster does not answer."""
    address = ray_address(spec)
    try:
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            raise HostsError("the Ray target needs Ray: pip install 'verl-zmq[ray]' (on every "
                             "node too)")
    except ValueError:
        pass
    if why := _unreachable(address):
        raise HostsError(f"ray: cannot reach the cluster at {address}: {why} (is `ray start "
                         f"--head` running there? HOSTS `ray:HOST:PORT` names it)")
    argv = [sys.executable, "-m", "launcher.ray_step", "nodes", "--address", address]
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=NODES_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise HostsError(f"ray: the cluster at {address} did not answer within "
                         f"{NODES_TIMEOUT_S:.0f}s (is `ray start --head` running there?)"
                         ) from None
    if r.returncode:
        tail = [ln for ln in r.stderr.strip().splitlines() if ln.strip()][-1:]
        raise HostsError(f"ray: cannot reach the cluster at {address}: "
                         f"{tail[0] if tail else f'exit code {r.returncode}'}")
    nodes = json.loads(r.stdout)
    if not nodes:
        raise HostsError(f"ray: the cluster at {address} has no live node")
    nodes.sort(key=lambda n: (not n["head"], n["address"]))
    return [Host(address=n["address"], node=n["id"], slots=max(1, n["cpus"]), gpus=n["gpus"],
                 via="ray", cluster=address, line=i + 1) for i, n in enumerate(nodes)]


def ray_argv(job: Job, host: Host, p: Placement, inner: list[str],
             standby: bool = False) -> list[str]:
    """The driver that runs `inner` (a `verl role` command line) as an actor on
    `host`'s node, asking Ray for the role's resources (a warm spare asks for
    none: it waits, idle, until it takes over)."""
    from verl_zmq.config.checks import memory_bytes

    res = getattr(job.resources, p.role, None)  # the registry has no resources section
    cpus = 0.0 if standby else float(max(1, res.cpu) if res is not None else 1)
    gpus = 0.0 if standby else float(res.gpu if res is not None else 0)
    memory = memory_bytes(res.memory) if res is not None and res.memory and not standby else 0
    return [sys.executable, "-m", "launcher.ray_step", "run", "--address", host.cluster,
            "--node", host.node, "--member", p.member_id, "--cpus", f"{cpus:g}",
            "--gpus", f"{gpus:g}", *(["--memory", str(memory)] if memory else []),
            "--timeout", f"{job.launch.ray.start_timeout_s:g}", "--", *inner]
