"""One role as a Ray actor: what the launcher runs, on its own machine, for each
role of a job on a Ray cluster (`verl-launch ray JOB`).

    python -m launcher.ray_step nodes --address ADDR
    python -m launcher.ray_step run --address ADDR --node NODE_ID --member ID
        [--cpus N] [--gpus N] [--memory BYTES] [--timeout S] -- ROLE ARGV...

`nodes` prints the cluster's live nodes as JSON. `run` is a Ray driver that
places a `RoleActor` on the node the plan chose (soft affinity: if that node is
gone, Ray places it on another), and the actor starts the role's own process
(`verl role ...`) on its node. Everything else is a pipe, so that to the
launcher this process is a role like one over SSH: this process's stdin goes to
the role's stdin (the job, then EOF to stop it), the role's stdout and stderr
come back on this process's own, SIGTERM is passed on, and the exit code is the
role's. When the actor's node dies, the exit code is `NODE_LOST` and the last
stderr line says which node: the launcher starts the role elsewhere.

Ray only places, starts and watches: the role's data path is the job's own
ZeroMQ sockets. Ray is imported here and in the actor only, never by the
launcher.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from typing import Any

from .ray_actor import POLL_S, RoleActor

NODE_LOST = 75  # the actor's node died (EX_TEMPFAIL): the launcher moves the role
SILENT_S = 60.0  # no answer from the actor this long (and no death reported): it ended
# after an actor's death, how long Ray may take to declare its node dead (its health
# checks: about 30 s by default) before the death counts as the role's own
CONFIRM_S = 45.0


def _say(msg: str) -> None:
    sys.stderr.buffer.write(f"error: {msg}\n".encode())
    sys.stderr.buffer.flush()


def _connect(address: str) -> Any:
    import ray

    ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR,
             namespace="verl-zmq", configure_logging=False)
    return ray


def nodes(address: str) -> int:
    """The cluster's live nodes as a JSON list on stdout."""
    ray = _connect(address)
    out = []
    for n in ray.nodes():
        if not n.get("Alive"):
            continue
        res = n.get("Resources", {})
        out.append({"id": n["NodeID"], "address": n["NodeManagerAddress"],
                    "cpus": int(res.get("CPU", 0)), "gpus": int(res.get("GPU", 0)),
                    "head": "node:__internal_head__" in res})
    print(json.dumps(out))
    return 0


def _node_alive(ray: Any, node_id: str) -> bool:
    try:
        return any(n["NodeID"] == node_id and n.get("Alive") for n in ray.nodes())
    except Exception:  # noqa: BLE001 - the cluster itself may be going
        return False


def _gone(ray: Any, member: str, where: dict[str, Any], why: str) -> int:
    """The actor died or went silent: NODE_LOST once Ray declares its node dead
    (waiting up to CONFIRM_S for Ray's health checks to decide), else 1."""
    deadline = time.monotonic() + CONFIRM_S
    while time.monotonic() < deadline:
        if not _node_alive(ray, where["node"]):
            _say(f"ray: node {where['ip']} is lost, and {member} with it")
            return NODE_LOST
        time.sleep(1.0)
    _say(f"ray: the actor of {member} on {where['ip']} ended: {why}")
    return 1


def _stdin_pump(ray: Any, actor: Any, stop: threading.Event) -> None:  # a thread
    """This process's stdin to the role's: the job, then EOF. Each call is waited
    for before the next: a threaded actor may run calls out of order, and a job
    read in two pieces must arrive in one order. A dead actor ends the pump (the
    main loop says why)."""
    try:
        while True:
            data = os.read(sys.stdin.fileno(), 65536)
            if not data:
                break
            ray.get(actor.write.remote(data))
        ray.get(actor.close_stdin.remote())
    except Exception:  # noqa: BLE001 - the actor or its node is gone: the poll says so
        pass
    stop.set()


def run(a: argparse.Namespace, argv: list[str]) -> int:
    ray = _connect(a.address)
    from ray.exceptions import ActorUnavailableError, GetTimeoutError, RayActorError
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    opts: dict[str, Any] = {
        "num_cpus": a.cpus, "num_gpus": a.gpus, "max_concurrency": 4, "max_restarts": 0,
        "scheduling_strategy": NodeAffinitySchedulingStrategy(a.node, soft=True)}
    if a.memory:
        opts["memory"] = a.memory
    actor = ray.remote(RoleActor).options(**opts).remote()
    try:
        where = ray.get(actor.start.remote(argv, {}), timeout=a.timeout)
    except GetTimeoutError:
        _say(f"ray: no node took {a.member} within {a.timeout:.0f}s (it asks for "
             f"{a.cpus} CPU, {a.gpus} GPU{f', {a.memory} bytes' if a.memory else ''}): "
             f"add nodes, or lower resources.<role> or launch.ray.start_timeout_s")
        return 1
    except RayActorError as e:
        _say(f"ray: the actor of {a.member} died as it started: {e}")
        return NODE_LOST if not _node_alive(ray, a.node) else 1
    stopped = threading.Event()
    threading.Thread(target=_stdin_pump, args=(ray, actor, stopped), daemon=True).start()
    pending: list[int] = []  # signals to pass on, from the handler to the loop

    signal.signal(signal.SIGTERM, lambda sig, _f: pending.append(sig))
    signal.signal(signal.SIGINT, lambda sig, _f: pending.append(sig))
    last_answer = time.monotonic()
    while True:
        while pending:
            actor.signal.remote(pending.pop())
        try:
            out, err, rc = ray.get(actor.poll.remote(), timeout=POLL_S + 10)
        except (GetTimeoutError, ActorUnavailableError) as e:
            # unavailable: Ray cannot reach the actor now, which it says of a node
            # that is going as of one that is slow; Ray itself decides which
            if time.monotonic() - last_answer > SILENT_S:
                return _gone(ray, a.member, where, f"it has not answered for {SILENT_S:.0f}s "
                             f"({type(e).__name__})")
            time.sleep(0.5)
            continue
        except RayActorError as e:
            return _gone(ray, a.member, where, str(e).splitlines()[0])
        last_answer = time.monotonic()
        if out:
            sys.stdout.buffer.write(out)
            sys.stdout.buffer.flush()
        if err:
            sys.stderr.buffer.write(err)
            sys.stderr.buffer.flush()
        if rc is not None:
            return int(rc) if rc >= 0 else 128 - int(rc)  # killed by a signal: as a shell says


def main(args: list[str] | None = None) -> int:
    args = sys.argv[1:] if args is None else args
    role_argv: list[str] = []
    if "--" in args:
        i = args.index("--")
        args, role_argv = args[:i], args[i + 1:]
    p = argparse.ArgumentParser(prog="python -m launcher.ray_step")
    sub = p.add_subparsers(dest="cmd", required=True)
    n = sub.add_parser("nodes")
    n.add_argument("--address", required=True)
    r = sub.add_parser("run")
    r.add_argument("--address", required=True)
    r.add_argument("--node", required=True)
    r.add_argument("--member", required=True)
    r.add_argument("--cpus", type=float, default=1.0)
    r.add_argument("--gpus", type=float, default=0.0)
    r.add_argument("--memory", type=int, default=0)
    r.add_argument("--timeout", type=float, default=120.0)
    a = p.parse_args(args)
    if a.cmd == "nodes":
        return nodes(a.address)
    if not role_argv:
        p.error("run: the role's command line goes after --")
    return run(a, role_argv)


if __name__ == "__main__":
    sys.exit(main())
