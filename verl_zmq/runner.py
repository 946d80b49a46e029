"""Start roles: one per process (`verl role`, what the launcher runs) or all of a
job in one process over inproc:// (`verl run`, Sample Factory's serial mode).
Both build the same RoleContext and call the same `serve`.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

import zmq.asyncio

from .comm.transport import CurveKeys, Transport
from .config import Job, dumps_job
from .config.checks import memory_bytes
from .config.members import RoleSpec, default_specs
from .log import get_logger, setup_logging


def read_stdin_bundle() -> dict[str, Any]:
    """The launcher's first stdin line: {"job": TOML text, "keys": {...} | null}."""
    line = sys.stdin.buffer.readline()
    if not line:
        raise ValueError("expected the job on stdin (one JSON line), got end of input")
    data = json.loads(line)
    if not isinstance(data, dict) or not isinstance(data.get("job"), str):
        raise ValueError("stdin bundle must be a JSON object with a 'job' string")
    return data


def standby(role: str, follower: Any = None) -> bool:
    """A warm spare's wait: import the role's modules (torch) at idle priority,
    so that a spare only takes CPU nobody else wants, and wait for the job on
    stdin; when it arrives (even mid-import) the process is back at normal
    priority. Idle only where this process may return (root, or RLIMIT_NICE
    allowing nice 0). `follower` (a `follow.Follower`) is started once idle, so
    its thread is idle too. False when stdin closed first (let go unused)."""
    import resource
    import threading

    from .roles.base import role_class

    idle = hasattr(os, "SCHED_IDLE") and (
        os.geteuid() == 0 or resource.getrlimit(resource.RLIMIT_NICE)[0] >= 20)
    main = threading.get_native_id()

    stdin: Any = sys.stdin.buffer  # a BufferedReader: it peeks
    # the job (or the end of stdin) may come before this thread has gone idle: the
    # lock makes "go idle" and "back to normal" happen in that order or not at all
    # (a spare left idle behind busy cores would not run again, job or not)
    lock = threading.Lock()
    arrived = False

    def watch() -> None:  # started before going idle: runs at normal priority
        nonlocal arrived
        stdin.peek(1)
        with lock:
            arrived = True
            if idle:
                os.sched_setscheduler(main, os.SCHED_OTHER, os.sched_param(0))

    waiter = threading.Thread(target=watch, daemon=True)
    waiter.start()
    with lock:
        if idle and not arrived:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    if follower is not None:
        follower.start()
    role_class(role).preload()
    waiter.join()
    return bool(stdin.peek(1))


def resolve_cpus(spec: str, allowed: list[int]) -> list[int] | None:
    """The cores a VERL_CPUS spec ("<reserved>:<own indexes>", see
    launcher/affinity.py) names among `allowed`; None when there is nothing to
    do, or too few cores to reserve any (every role then shares them all)."""
    if not spec:
        return None
    reserved, _, own = spec.partition(":")
    allowed = sorted(allowed)
    k = int(reserved)
    if len(allowed) <= k:
        return None
    return [allowed[int(i)] for i in own.split(",")] if own else allowed[:len(allowed) - k]


def apply_cpus(spec: str) -> list[int] | None:
    """Pin this process as the launcher's VERL_CPUS spec says; None when there is
    nothing to do."""
    if not spec or not hasattr(os, "sched_setaffinity"):
        return None
    cpus = resolve_cpus(spec, sorted(os.sched_getaffinity(0)))
    if cpus is not None:
        os.sched_setaffinity(0, cpus)
    return cpus


def pin(log: Any) -> None:
    """Apply the launcher's VERL_CPUS and log it; never fail a role over its pinning."""
    spec = os.environ.get("VERL_CPUS", "")
    try:
        cpus = apply_cpus(spec)
        if cpus is not None:
            log.info("cpu_affinity", cpus=cpus)
    except (ValueError, IndexError, OSError) as e:
        log.warning("cpu_affinity_failed", spec=spec, error=str(e))


def lower_priority(nice: int, log: Any) -> None:
    """`resources.<role>.nice`: yield shared cores to the other roles (a sampler to
    its learner, which every sampler waits on). Where the kernel shares CPU between
    sessions first (autogroup), a nice value counts only inside the session, so a
    role leading its own (as launched) lowers its session's too; the kernel takes
    one such change per 0.1 s, so a refused one is retried in the background."""
    if nice <= 0:
        return
    try:
        os.nice(nice)  # before any thread: threads take their creator's
    except OSError as e:
        log.warning("nice_failed", nice=nice, error=str(e))
        return
    log.info("priority_lowered", nice=nice)
    if os.getsid(0) == os.getpid() and os.path.exists("/proc/self/autogroup"):
        threading.Thread(target=_autogroup_nice, args=(nice,), daemon=True).start()


def _autogroup_nice(nice: int, tries: int = 30) -> None:
    for _ in range(tries):
        try:
            with open("/proc/self/autogroup", "w") as f:
                f.write(str(nice))
            return
        except OSError as e:
            if e.errno != errno.EAGAIN:
                return
            time.sleep(0.1)


def address_space() -> int:
    """Bytes of address space this process maps now (0 where /proc cannot say)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def limit_memory(spec: str) -> None:
    """Cap this process's address space (`resources.<role>.memory`, e.g. "2GB").
    A role forked from the torch zygote holds torch already: when that is over the
    limit, a MemoryError says so now (the kernel would take the limit and fail the
    role's next allocation instead)."""
    if not spec:
        return
    import resource

    limit = memory_bytes(spec)
    used = address_space()
    if used >= limit:
        raise MemoryError(f"{used / 2**20:.0f} MB of address space in use at the role's "
                          "start (torch imported) is over the limit")
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def make_transport(ctx: zmq.asyncio.Context, job: Job, host: str, keys: CurveKeys | None,
                   log: Any, inproc: bool = False, registry: str = "") -> Transport:
    """The role's transport; it never binds the registry's port (`registry`, its
    endpoint, where the launcher may have chosen another than the job's)."""
    def denied(key: str) -> None:
        log.warning("auth_denied", client_key=key[:40], mechanism="CURVE")

    L = job.launch
    lo, hi = L.port_range
    # a connection counts as dead after the registry's own liveness period, but never
    # sooner than 3 s: a process starved of CPU that long on a busy machine is alive
    return Transport(ctx, host=host, port_range=(lo, hi), keys=keys, inproc=inproc,
                     on_denied=denied, reserved=frozenset({_port(registry) or job.registry_port}),
                     heartbeat_s=L.heartbeat_interval_s,
                     dead_after_s=max(3.0, L.liveness_timeout_s))


def _port(endpoint: str) -> int:
    tail = endpoint.rpartition(":")[2]
    return int(tail) if tail.isdigit() else 0


def _over_limit(log: Any, spec: RoleSpec, limit: str, e: BaseException) -> int:
    msg = (f"{spec.role} {spec.member_id} went over its memory limit of {limit} "
           f"(resources.{spec.role}.memory): {type(e).__name__}: {str(e)[:200]}")
    log.error("memory_limit_exceeded", error=msg)
    print(f"error: {msg}", file=sys.stderr, flush=True)  # the launcher's summary shows it
    return 1


def run_role_process(job: Job, spec: RoleSpec, registry: str, bind: str, run_dir: Path,
                     keys: CurveKeys | None, exit_on_stdin_eof: bool,
                     log_stream: IO[str] | None = None, incarnation: int | None = None,
                     extra: dict[str, Any] | None = None) -> int:
    """Run one role in this process until it stops; return its exit code."""
    from .roles.base import RoleContext, default_incarnation, index_of, role_class
    from .roles.service import out_of_memory, serve

    inc = incarnation or default_incarnation()
    log = setup_logging(spec.role, spec.member_id, spec.group, inc, job.logging.level,
                        stream=log_stream)
    res = getattr(job.resources, spec.role, None)
    pin(log)
    if res is not None:
        lower_priority(res.nice, log)

    def over_limit(e: BaseException) -> int:
        return _over_limit(log, spec, res.memory if res is not None else "?", e)

    try:
        if res is not None:
            limit_memory(res.memory)
    except MemoryError as e:
        return over_limit(e)
    except (ValueError, OSError) as e:
        log.error("bad_memory_limit", value=res.memory if res is not None else "", error=str(e))
        return 2

    try:
        cls = role_class(spec.role, job)  # torch alone needs ~1 GB of address space
    except (MemoryError, ImportError, OSError) as e:
        if isinstance(e, MemoryError) or (res is not None and res.memory and out_of_memory(e)):
            return over_limit(e)
        raise

    async def main() -> int:
        zctx = zmq.asyncio.Context()
        transport = make_transport(zctx, job, bind, keys, log, registry=registry)
        ctx = RoleContext(job=job, role=spec.role, member_id=spec.member_id, group=spec.group,
                          index=index_of(spec.member_id), incarnation=inc, registry=registry,
                          run_dir=run_dir, host=bind, transport=transport, log=log,
                          exit_on_stdin_eof=exit_on_stdin_eof, extra=extra or {})
        try:
            role = cls(ctx)
            roles.append(role)
            return await serve(role)
        finally:
            transport.close()
            zctx.term()

    roles: list[Any] = []
    try:
        rc = asyncio.run(main())
    except MemoryError as e:
        return over_limit(e)
    if rc != 0 and roles and roles[0].memory_error is not None:
        return over_limit(roles[0].memory_error)
    return rc


async def _until_all_stop(roles: dict[asyncio.Task[int], Any]) -> list[int]:
    """Every role's exit code; a role that fails stops the others (in one process
    there is no launcher to restart it, and a job without it would wait forever)."""
    codes, pending = [], set(roles)
    while pending:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for t in done:
            codes.append(t.result())
            if codes[-1] != 0:
                failed = roles[t]
                print(f"error: {failed.id} exited with code {codes[-1]}; stopping every role",
                      file=sys.stderr, flush=True)
                for r in roles.values():
                    r.request_stop(f"role_failed:{failed.id}")
    return codes


def _stop_all(roles: list[Any]) -> None:
    for r in roles:
        r.request_stop("signal")


def run_inproc(job: Job, run_dir: Path, log_stream: IO[str] | None = None) -> int:
    """Every role of the job as asyncio tasks in this process over inproc://."""
    from .roles.base import RoleContext, default_incarnation, index_of, role_class
    from .roles.service import serve

    specs = default_specs(job)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "job.toml").write_text(dumps_job(job))
    setup_logging("run", "run", level=job.logging.level, stream=log_stream)

    async def main() -> int:
        zctx = zmq.asyncio.Context()
        roles = []
        for spec in specs:
            inc = default_incarnation()
            log = get_logger(role=spec.role, id=spec.member_id, group=spec.group,
                             incarnation=inc, host="inproc", pid=os.getpid())
            t = make_transport(zctx, job, "inproc", None, log, inproc=True)
            ctx = RoleContext(job=job, role=spec.role, member_id=spec.member_id,
                              group=spec.group, index=index_of(spec.member_id),
                              incarnation=inc, registry="inproc://registry", run_dir=run_dir,
                              host="inproc", transport=t, log=log,
                              extra={"watchdog": False})  # os._exit would end every role
            roles.append(role_class(spec.role, job)(ctx))
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, _stop_all, roles)
        # the registry binds first: inproc connect before bind is allowed, but keep order
        tasks = [asyncio.create_task(serve(roles[0], install_signals=False))]
        await asyncio.sleep(0.05)
        tasks += [asyncio.create_task(serve(r, install_signals=False)) for r in roles[1:]]
        codes = await _until_all_stop(dict(zip(tasks, roles)))
        zctx.term()
        return max(codes)

    return asyncio.run(main())
