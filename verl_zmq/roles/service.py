"""Running a role: `serve` supervises its tasks in one `asyncio.TaskGroup`.

A crash in any task is logged with its traceback and the process exits
non-zero; SIGTERM/SIGINT (or a job-wide shutdown from the registry) stops it
cleanly: it persists what it owns, deregisters, closes its sockets and exits 0.
A role asked to stop that is not gone within the job's grace period reports
where its tasks hang and exits hard.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Coroutine
from typing import Any

from ..config.members import reward_models, tool_servers
from ..config.wiring import SCORES, TOOL_CALLS
from ..fatal import CannotGoOn
from .base import Role, RoleRefused
from .membership import RegistryClient

EXIT_OK, EXIT_FAILED, EXIT_REFUSED = 0, 1, 2


class _Stop(Exception):
    pass


def out_of_memory(e: BaseException) -> bool:
    """An error that an address-space limit causes: MemoryError, or a shared library
    (torch's, imported late) that could not be mapped."""
    if isinstance(e, MemoryError):
        return True
    text = str(e).lower()
    return isinstance(e, ImportError | OSError) and ("failed to map" in text
                                                     or "cannot allocate memory" in text)


def _leaves(eg: BaseExceptionGroup) -> list[BaseException]:
    """The exceptions inside (nested) groups: a role's own TaskGroup nests one more."""
    out: list[BaseException] = []
    for e in eg.exceptions:
        out += _leaves(e) if isinstance(e, BaseExceptionGroup) else [e]
    return out


def task_stacks() -> list[str]:
    """Where every asyncio task of this loop is waiting: for hung-role reports."""
    out = []
    for t in asyncio.all_tasks():
        buf = io.StringIO()
        t.print_stack(limit=6, file=buf)
        out.append(buf.getvalue().strip())
    return out


def start_watchdog(role: Role) -> None:
    """A role asked to stop must be gone within the job's grace period: if not,
    report where its tasks hang and exit hard (no orphan waits on a stuck task)."""
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


def _log_metrics(role: Role, **extra: Any) -> None:
    values = role.metrics()
    for h in role.helpers:
        values.update(h.metrics())
    values[f"{role.name}/wire_errors"] = role.wire_stats.errors
    role.log.info("metrics", **values, **extra)
    role.reported({**values, **extra})


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
    if role.ctx.extra.get("watchdog", True):  # from now on the stop has a deadline
        start_watchdog(role)
    raise _Stop()


def _clients(role: Role) -> None:
    """A role that calls tools, or scores responses, in a job with tool servers or
    reward-model servers: its requests go there (set before its setup builds what
    makes them). The clients' modules are imported only where used."""
    if role.name in TOOL_CALLS.src and tool_servers(role.job):
        from .tool_client import attach

        attach(role)
    if role.name in SCORES.src and reward_models(role.job):
        from .rm_client import attach as attach_scores

        attach_scores(role)


def _tasks(role: Role) -> list[Coroutine[Any, Any, None]]:
    """What runs for a role's life: its stopper, its work and what runs beside it,
    its metrics, its registry client, its watch on the launcher's pipe."""
    out = [_stopper(role), role.run(), *(h.run() for h in role.helpers), _metrics_loop(role)]
    if role.registry_client is not None:
        out.append(role.registry_client.run())
    if role.ctx.exit_on_stdin_eof:
        out.append(_watch_stdin(role))
    return out


async def serve(role: Role, install_signals: bool = True) -> int:
    """Run a role until it is stopped; return its exit code."""
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
        _clients(role)
        await role.setup()
        role.log.info("role_started", endpoints=role.endpoints, run_dir=str(ctx.run_dir),
                      argv=sys.argv[1:] if install_signals else [])
        if role.uses_registry:
            role.registry_client = RegistryClient(role)
        async with asyncio.TaskGroup() as tg:
            for task in _tasks(role):
                tg.create_task(task)
    except* _Stop:
        pass
    except* RoleRefused as eg:
        role.log.error("registration_refused", error=str(eg.exceptions[0]))
        rc = EXIT_REFUSED
    except* CannotGoOn as eg:
        why = str(next(iter(_leaves(eg))))  # the learner's own task group nests it
        role.log.error("cannot_go_on", error=why)
        with contextlib.suppress(OSError, ValueError):  # the line the launcher shows
            print(f"error: {role.id}: {why}", file=sys.stderr, flush=True)
        rc = EXIT_REFUSED
    except* Exception as eg:
        for e in _leaves(eg):
            role.log.error("task_failed", error=f"{type(e).__name__}: {e}", exc_info=e)
            # the traceback on stderr (the .err file), then one line the launcher shows
            with contextlib.suppress(OSError, ValueError):
                traceback.print_exception(e, file=sys.stderr)
            print(f"error: {role.id}: {type(e).__name__}: {str(e)[:500]}", file=sys.stderr,
                  flush=True)
            if out_of_memory(e):  # the runner names the role's memory limit
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
