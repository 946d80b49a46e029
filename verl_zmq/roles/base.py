"""Role lifecycle: bind, register, heartbeat, run, and stop cleanly.

A role is an asyncio service. `serve(role)` supervises its tasks in one
`asyncio.TaskGroup`: a crash in any task is logged with its traceback and the
process exits non-zero; SIGTERM/SIGINT (or a job-wide shutdown from the
registry) stops it cleanly: it persists what it owns, deregisters, closes its
sockets and exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import zmq
import zmq.asyncio

from .. import wire
from ..config import Job
from ..transport import Transport

EXIT_OK, EXIT_FAILED, EXIT_REFUSED = 0, 1, 2
RECV_POLL_MS = 250
_seq = itertools.count(1)


class RoleRefused(Exception):
    """The registry refused this member (for example its versions differ)."""


class _Stop(Exception):
    pass


@dataclass
class RoleContext:
    """What a role is handed: its job, identity, registry endpoint and transport."""

    job: Job
    role: str
    member_id: str
    group: str
    index: int
    incarnation: int
    registry: str
    run_dir: Path
    host: str
    transport: Transport
    log: Any
    exit_on_stdin_eof: bool = False
    extra: dict = field(default_factory=dict)


class WireStats:
    """Counts malformed messages; logs at most one line per sender per interval."""

    def __init__(self, log, interval_s: float):
        self.log = log
        self.interval_s = interval_s
        self.errors = 0
        self._last: dict[str, float] = {}

    def reject(self, sender: str, err: Exception) -> None:
        self.errors += 1
        now = time.monotonic()
        if now - self._last.get(sender, -1e9) >= self.interval_s:
            self._last[sender] = now
            if len(self._last) > 10_000:  # bounded: forget the oldest senders
                self._last.clear()
            self.log.warning("message_rejected", sender=sender[:64], error=str(err)[:300],
                             wire_errors=self.errors)


async def send(sock: zmq.asyncio.Socket, msg: wire.Message, src: str,
               prefix: list | None = None) -> None:
    msg.src = src
    msg.seq = next(_seq)
    await sock.send_multipart((prefix or []) + wire.encode(msg), copy=False)


async def recv(sock: zmq.asyncio.Socket, stats: WireStats, n_prefix: int = 0,
               expect: tuple[type, ...] | None = None):
    """Receive one message: (prefix frames, message) or (prefix, None) if it was bad."""
    # poll with a timeout rather than block in recv: each poll re-reads the socket's
    # events, so a wake-up lost on the edge-triggered fd (seen with inproc pipes that
    # attach while a reader waits) costs at most one interval, never forever
    while not await sock.poll(RECV_POLL_MS):
        pass
    frames = await sock.recv_multipart(copy=False)
    prefix = frames[:n_prefix]
    sender = prefix[0].bytes.hex() if prefix else "peer"
    if len(frames) <= n_prefix:
        stats.reject(sender, wire.WireError("no frames after the envelope"))
        return prefix, None
    try:
        msg = wire.decode(frames[n_prefix:])
    except wire.WireError as e:
        stats.reject(sender, e)
        return prefix, None
    if expect is not None and not isinstance(msg, expect):
        stats.reject(msg.src or sender, wire.WireError(f"unexpected kind {msg.KIND.name}"))
        return prefix, None
    return prefix, msg


class Role:
    """A role process's behaviour; `serve` runs it. Subclasses bind in `setup`,
    work in `run`, follow membership in `on_membership`, report in `metrics`."""

    name: ClassVar[str] = "role"
    uses_registry: ClassVar[bool] = True

    def __init__(self, ctx: RoleContext):
        self.ctx = ctx
        self.job = ctx.job
        self.log = ctx.log
        self.wire_stats = WireStats(ctx.log, ctx.job.logging.interval_s)
        self.stop_event = asyncio.Event()
        self.stop_reason = ""
        self.endpoints: dict[str, str] = {}
        self.members: dict[str, wire.Member] = {}
        self.registry_client = None
        self.started = time.monotonic()
        self.memory_error: MemoryError | None = None

    @property
    def id(self) -> str:
        return self.ctx.member_id

    def request_stop(self, reason: str) -> None:
        if not self.stop_event.is_set():
            self.stop_reason = reason
            self.log.info("stop_requested", reason=reason)
            self.stop_event.set()
            if self.ctx.extra.get("watchdog", True):
                _start_watchdog(self)

    async def setup(self) -> None:
        """Bind sockets and fill `self.endpoints`."""

    async def run(self) -> None:
        """The role's work; may return (the role then idles until stopped)."""

    def on_membership(self, members: dict[str, wire.Member]) -> None:
        """Membership changed: connect to / disconnect from members of the group."""
        self.members = members

    def metrics(self) -> dict[str, float]:
        return {}

    def status(self) -> dict[str, float]:
        """Small numbers carried by each heartbeat (queue depths, versions)."""
        return {}

    async def teardown(self) -> None:
        """Persist what the role owns; called once when stopping, crash or not."""

    def group_members(self, role: str) -> dict[str, wire.Member]:
        return {m.id: m for m in self.members.values()
                if m.role == role and m.group == self.ctx.group}

    async def job_shutdown(self, reason: str) -> None:
        """Ask the whole job to stop (through the registry), then stop this role."""
        if self.registry_client is not None:
            await self.registry_client.send_shutdown(reason)
        self.request_stop(reason)


def _leaves(eg: BaseExceptionGroup) -> list[BaseException]:
    """The exceptions inside (nested) groups: a role's own TaskGroup nests one more."""
    out: list[BaseException] = []
    for e in eg.exceptions:
        out += _leaves(e) if isinstance(e, BaseExceptionGroup) else [e]
    return out


def task_stacks() -> list[str]:
    """Where every asyncio task of this loop is waiting: for hung-role reports."""
    import io

    out = []
    for t in asyncio.all_tasks():
        buf = io.StringIO()
        t.print_stack(limit=6, file=buf)
        out.append(buf.getvalue().strip())
    return out


def _start_watchdog(role: Role) -> None:
    """A role asked to stop must be gone within the job's grace period: if not,
    report where its tasks hang and exit hard (no orphan waits on a stuck task)."""
    import threading

    grace = role.job.launch.grace_s
    loop = asyncio.get_running_loop()

    def watch() -> None:
        time.sleep(grace)
        try:
            stacks = asyncio.run_coroutine_threadsafe(_stacks(), loop).result(1.0)
        except Exception as e:  # the loop itself is stuck
            stacks = [f"event loop unresponsive: {e!r}"]
        role.log.error("stop_timed_out", grace_s=grace, tasks=stacks)
        os._exit(EXIT_FAILED)

    threading.Thread(target=watch, name="stop-watchdog", daemon=True).start()


async def _stacks() -> list[str]:
    return task_stacks()


def _log_metrics(role: Role, **extra) -> None:
    values = role.metrics()
    values[f"{role.name}/wire_errors"] = role.wire_stats.errors
    role.log.info("metrics", **values, **extra)


async def _metrics_loop(role: Role) -> None:
    interval = role.job.logging.interval_s
    while True:
        await asyncio.sleep(interval)
        _log_metrics(role)


async def _watch_stdin(role: Role) -> None:
    """The launcher keeps our stdin open; EOF means our SSH session (or launcher) is gone."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while await reader.read(4096):
        pass
    role.request_stop("stdin_closed")


async def _stopper(role: Role) -> None:
    await role.stop_event.wait()
    raise _Stop()


async def serve(role: Role, install_signals: bool = True) -> int:
    """Run a role until it is stopped; return its exit code."""
    from .membership import RegistryClient

    ctx = role.ctx
    loop = asyncio.get_running_loop()
    if install_signals:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, role.request_stop, signal.Signals(sig).name)
        loop.add_signal_handler(signal.SIGUSR1, lambda: role.log.info(
            "task_stacks", tasks=task_stacks()))
    rc = EXIT_OK
    ctx.transport.start_auth()
    try:
        await role.setup()
        role.log.info("role_started", endpoints=role.endpoints, run_dir=str(ctx.run_dir),
                      argv=sys.argv[1:] if install_signals else [])
        if role.uses_registry:
            role.registry_client = RegistryClient(role)
        async with asyncio.TaskGroup() as tg:
            tg.create_task(_stopper(role))
            tg.create_task(role.run())
            tg.create_task(_metrics_loop(role))
            if role.registry_client is not None:
                tg.create_task(role.registry_client.run())
            if ctx.exit_on_stdin_eof:
                tg.create_task(_watch_stdin(role))
    except* _Stop:
        pass
    except* RoleRefused as eg:
        role.log.error("registration_refused", error=str(eg.exceptions[0]))
        rc = EXIT_REFUSED
    except* Exception as eg:
        for e in _leaves(eg):
            role.log.error("task_failed", error=f"{type(e).__name__}: {e}", exc_info=e)
            # one line on stderr too: the launcher's summary shows a role's last stderr lines
            print(f"error: {role.id}: {type(e).__name__}: {str(e)[:500]}", file=sys.stderr,
                  flush=True)
            if isinstance(e, MemoryError):  # the runner names the role's memory limit
                role.memory_error = e
        rc = EXIT_FAILED
    try:
        await role.teardown()
    except Exception as e:
        role.log.error("teardown_failed", error=str(e), exc_info=e)
        rc = rc or EXIT_FAILED
    if role.registry_client is not None:
        await role.registry_client.close()
    with contextlib.suppress(Exception):  # the last counts, as the role stops
        _log_metrics(role, final=True)
    ctx.transport.close()
    role.log.info("role_stopped", reason=role.stop_reason or "error", exit_code=rc,
                  uptime_s=round(time.monotonic() - role.started, 3))
    return rc


def reconnect(sock, current: dict[str, str], wanted: dict[str, str], log, what: str) -> None:
    """Connect to endpoints that appeared, disconnect from those that left."""
    for mid, ep in list(current.items()):
        if wanted.get(mid) != ep:
            with contextlib.suppress(zmq.ZMQError):
                sock.disconnect(ep)
            del current[mid]
            log.info(f"{what}_disconnected", member=mid, endpoint=ep)
    for mid, ep in wanted.items():
        if ep and mid not in current:
            sock.connect(ep)
            current[mid] = ep
            log.info(f"{what}_connected", member=mid, endpoint=ep)



ROLE_CLASSES: dict[str, Callable[[], type[Role]]] = {}


def role_class(name: str) -> type[Role]:
    """Import a role's module only when asked: the registry must not import torch."""
    import importlib

    modules = {"registry": "registry", "sampler": "sampler", "replay": "replay",
               "learner": "learner", "evaluator": "evaluator", "peer": "peer"}
    if name not in modules:
        raise KeyError(name)
    mod = importlib.import_module(f"verl_zmq.roles.{modules[name]}")
    return mod.ROLE


def index_of(member_id: str) -> int:
    """`sampler-3` -> 3: the index that seeds envs and picks exploration."""
    tail = member_id.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def default_incarnation() -> int:
    """New at every start: microseconds since the epoch, mixed with the pid."""
    return (time.time_ns() // 1000) * 10 + os.getpid() % 10
