"""Starting one role process: locally for localhost, as a job step (`srun`) on a
Slurm allocation's nodes, through the system `ssh` client for every other host
(so ~/.ssh/config, agents, ProxyJump and ControlMaster apply). The resolved
job and, with CURVE, the job's keys travel as the first line of the role's
stdin, never on a command line or in a world-readable file; the stdin then
stays open, and its EOF (the launcher, the SSH session or the job step gone)
stops the role: no orphans on any host.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shlex
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verl_zmq.config import Job

from .forking import ForkedProcess, ForkServer, forkable
from .hosts import Host
from .plan import Placement, Plan
from .ray_target import ray_argv
from .relay import LogRelay

SSH_BASE = ["ssh", "-o", "BatchMode=yes", "-o", "ServerAliveInterval=5",
            "-o", "ServerAliveCountMax=3"]


def python_for(job: Job, host: Host) -> str:
    """Ours on this host and on a Slurm allocation's nodes (they share a filesystem),
    else `python3` unless the hosts file or the job names one."""
    if host.python:
        return host.python
    if job.launch.python:
        return job.launch.python
    return "python3" if host.by_ssh else sys.executable


def run_dir_on(host: Host, run_dir: Path) -> str:
    """Where a role keeps its files (checkpoints, snapshots) on its own host: the same
    path locally and on Slurm nodes (a shared filesystem); on SSH hosts relative to
    the working directory when the run folder is under ours (no shared filesystem
    is assumed), else the same absolute path."""
    if not host.by_ssh:
        return str(run_dir)
    try:
        return str(Path(run_dir).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(run_dir)


def role_argv(job: Job, plan: Plan, p: Placement, run_dir: Path,
              standby: bool = False) -> list[str]:
    """The `verl role` command line for one placement (what --dry-run prints);
    `standby`: a warm spare's, which imports first and then waits for the job."""
    host = plan.host_of(p)
    return [python_for(job, host), "-m", "verl_zmq.cli", "role", p.role, "--job", "-",
            "--registry", plan.registry_endpoint, "--id", p.member_id, "--group", p.group,
            "--bind", host.bind_address, "--run-dir", run_dir_on(host, run_dir),
            "--exit-on-stdin-eof", *(["--standby"] if standby else [])]


def ssh_argv(job: Job, host: Host, inner: list[str]) -> list[str]:
    workdir = host.workdir or job.launch.workdir
    remote = shlex.join(inner)
    if workdir:
        remote = f"cd {shlex.quote(workdir)} && exec {remote}"
    else:
        remote = f"exec {remote}"
    argv = list(SSH_BASE) + list(job.launch.ssh_options)
    if host.port:
        argv += ["-p", str(host.port)]
    return argv + [host.ssh_target, remote]


def srun_argv(job: Job, host: Host, p: Placement, inner: list[str]) -> list[str]:
    """A job step of the current Slurm allocation on the placement's node: one task,
    sharing the allocation's resources with the other steps (--overlap), its stdin
    from ours (the job, then EOF to stop it), a failing step never cancelling the
    others (the launcher restarts roles itself)."""
    argv = ["srun", "--nodes=1", "--ntasks=1", f"--nodelist={host.node or host.address}",
            "--overlap", "--kill-on-bad-exit=0", "--input=all", f"--job-name=verl-{p.member_id}"]
    res = getattr(job.resources, p.role, None)  # the registry has no resources section
    cpus = res.cpu if res is not None else 0
    if cpus:
        argv.append(f"--cpus-per-task={int(cpus)}")
    workdir = host.workdir or job.launch.workdir
    if workdir:
        argv.append(f"--chdir={workdir}")
    return argv + inner


def full_argv(job: Job, plan: Plan, p: Placement, run_dir: Path,
              standby: bool = False) -> list[str]:
    inner = role_argv(job, plan, p, run_dir, standby)
    host = plan.host_of(p)
    if host.is_local:
        return inner
    if host.via == "ray":
        return ray_argv(job, host, p, inner, standby)
    return srun_argv(job, host, p, inner) if host.via == "srun" else ssh_argv(job, host, inner)


async def check_reachable(job: Job, host: Host, timeout_s: float = 10.0) -> str:
    """Empty when `ssh host true` works within the timeout, else why not."""
    argv = ssh_argv(job, host, ["true"])
    argv[1:1] = ["-o", f"ConnectTimeout={int(timeout_s)}"]
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE)
        _, err = await asyncio.wait_for(proc.communicate(), timeout_s + 5)
    except TimeoutError:
        proc.kill()
        return f"no answer within {timeout_s:.0f}s"
    except OSError as e:
        return f"cannot run ssh: {e}"
    if proc.returncode != 0:
        return err.decode(errors="replace").strip().splitlines()[-1:][0] if err.strip() \
            else f"ssh exited {proc.returncode}"
    return ""



Proc = asyncio.subprocess.Process | ForkedProcess  # a role's process, exec'd or forked

@dataclass
class RoleProcess:
    """One running (or restartable) role process and its log files; with
    `spare_argv`, also a warm spare: the same role started ahead of need, its
    imports (torch) done, waiting for the job on stdin, so that a restart costs
    what the role's setup costs and not an interpreter's start."""

    placement: Placement
    argv: list[str]
    bundle: bytes
    log_path: Path
    err_path: Path
    env: dict[str, str] = field(default_factory=dict)
    spare_argv: list[str] | None = None
    proc: asyncio.subprocess.Process | ForkedProcess | None = None
    spare: asyncio.subprocess.Process | ForkedProcess | None = None
    restarts: int = 0  # in all
    streak: int = 0  # restarts since it last stayed up for launch.restart_window_s
    started_at: float = 0.0  # monotonic
    started_wall: float = 0.0  # the same, by the clock its log lines carry
    exit_code: int | None = None
    err_from: int = 0  # err_path's size when this incarnation started
    spares_lost: int = 0  # spares that exited before they were used
    forks: ForkServer | None = None  # local roles: forked from it while it lives
    relay: bool = False  # remote: the launcher writes its output into the log files
    log_events: tuple[Any, Any] = (None, None)  # LogRelay's on_error, on_back
    # pid -> its relays
    relays: dict[int, list[asyncio.Task[None]]] = field(default_factory=dict)

    @property
    def process(self) -> Proc:
        """The process of this incarnation (started: `start` ran)."""
        assert self.proc is not None, "the role was started"
        return self.proc

    async def _spawn(self, argv: list[str]) -> Proc:
        """The role's process: forked by the fork server when it can, else exec'd
        (an `asyncio.subprocess.Process`, or a `ForkedProcess` that acts as one);
        a remote one's output relayed into its log files."""
        if self.relay:
            return await self._spawn_relayed(argv)
        out = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        err = open(self.err_path, "ab")  # noqa: SIM115
        try:
            if self.forks is not None and forkable(argv):
                child = await self.forks.spawn(argv, {**os.environ, **self.env},
                                               out.fileno(), err.fileno())
                if child is not None:
                    return child
            return await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=out, stderr=err,
                start_new_session=True, env={**os.environ, **self.env})
        finally:
            out.close()
            err.close()

    async def _spawn_relayed(self, argv: list[str]) -> asyncio.subprocess.Process:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, start_new_session=True,
            env={**os.environ, **self.env})
        loop = asyncio.get_running_loop()
        # held until they end: a task nothing holds may vanish
        self.relays[proc.pid] = [
            loop.create_task(LogRelay(path, self.placement.member_id, *self.log_events)
                             .run(stream))
            for stream, path in ((proc.stdout, self.log_path), (proc.stderr, self.err_path))
            if stream is not None]
        return proc

    async def drained(self, timeout_s: float = 2.0) -> None:
        """After the process ended: its last lines are in the log files (a relayed
        role's output may still be on its way)."""
        tasks = self.relays.pop(self.proc.pid, []) if self.proc is not None else []
        if tasks:
            await asyncio.wait(tasks, timeout=timeout_s)
        for pid in [pid for pid, ts in self.relays.items() if all(t.done() for t in ts)]:
            del self.relays[pid]  # spares' that ended unused

    async def start(self) -> bool:
        """Start the role (on the warm spare when there is one); True if a spare."""
        warm = self.spare is not None and self.spare.returncode is None
        self.proc = self.spare if warm else await self._spawn(self.argv)
        self.spare = None
        self.exit_code = None
        self.started_at = time.monotonic()
        self.started_wall = time.time()
        try:
            self.err_from = self.err_path.stat().st_size
        except OSError:
            self.err_from = 0
        stdin = self.process.stdin
        assert stdin is not None  # every role is started with a pipe for the job
        stdin.write(self.bundle)
        await stdin.drain()
        return warm

    async def keep_spare(self) -> bool:
        """Start a spare when there is none (a spare that died unused is counted);
        True when one was started."""
        if self.spare_argv is None:
            return False
        if self.spare is not None:
            if self.spare.returncode is None:
                return False
            self.spares_lost += 1
        self.spare = await self._spawn(self.spare_argv)
        return True

    def drop_spare(self) -> Proc | None:
        """Kill the warm spare (idle: nothing to lose); the process, to be reaped."""
        spare, self.spare = self.spare, None
        if spare is not None and spare.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(spare.pid, signal.SIGKILL)
        return spare

    def err_tail(self, n: int) -> str:
        """The last `n` lines this incarnation wrote to stderr (not an earlier one's:
        a moved step's file still holds the node failure that moved it)."""
        return last_lines(self.err_path, n, self.err_from)

    def last_error(self) -> str:
        """What ended this incarnation, as its stderr says (`error_line`), without
        the member id a role puts before it."""
        err = error_line(last_lines(self.err_path, 40, self.err_from))
        return err.removeprefix(f"{self.placement.member_id}: ")

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    def signal(self, sig: int) -> None:
        if not self.running:
            return
        try:
            if sig == signal.SIGKILL:
                os.killpg(self.process.pid, sig)  # the session: ssh and what it started
            else:
                self.process.send_signal(sig)
        except ProcessLookupError:
            pass


def last_lines(path: Path, n: int, start: int = 0) -> str:
    """The last `n` lines of a log file from byte `start` on ("" when unreadable)."""
    try:
        with open(path, "rb") as f:
            f.seek(start)
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-n:])


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def error_line(text: str) -> str:
    """A role's error from the end of its stderr: the last `error: ` line (a role
    writes one as it fails, after the traceback), else the last line; terminal
    colour codes (a library's warnings) removed."""
    lines = [ANSI.sub("", ln).strip() for ln in text.splitlines()]
    lines = [ln for ln in lines if ln]
    for ln in reversed(lines):
        if ln.startswith("error: "):
            return ln.removeprefix("error: ")
    return lines[-1] if lines else ""


def make_bundle(job_text: str, keys: dict[str, str] | None) -> bytes:
    return (json.dumps({"job": job_text, "keys": keys}) + "\n").encode()
