"""One call, confined. As root (what a tool server runs as on a cluster's node):
fresh network, mount and PID namespaces (`unshare`), so the call has no network
(its loopback is down), sees every file read-only but its own new folder, and
every process it starts dies with it; it runs as `nobody` under limits on CPU
time, memory, file size and processes. As another user the limits hold and the
call runs in its own session and folder, but the network and the files are the
user's: `confined()` says which, and a tool server warns.

Whatever the call does, `run` returns within `Limits.wall_s` (and the time to
kill it) with an `Outcome` whose `error` says why it failed, in words a model
can read back as a tool's answer.
"""

from __future__ import annotations

import contextlib
import os
import resource
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

JAIL = Path(__file__).with_name("jail.py")


@dataclass(frozen=True)
class Limits:
    """What one call may use."""

    wall_s: float = 10.0  # the call is killed after this long
    cpu_s: int = 5  # CPU seconds (SIGXCPU, then SIGKILL a second later)
    memory_mb: int = 512  # address space of each process
    file_mb: int = 16  # the largest file it may write
    processes: int = 16  # processes and threads of `nobody` at once (as root)
    output_bytes: int = 65_536  # stdout and stderr each; more ends the call


@dataclass(frozen=True)
class Outcome:
    """How a call ended: `error` is "" when it exited 0 in its limits."""

    stdout: str
    stderr: str
    exit_code: int | None  # None: killed by the sandbox (timeout, output)
    error: str
    seconds: float

    @property
    def ok(self) -> bool:
        return not self.error


def confined() -> bool:
    """Whether calls get their own network, read-only files and PID namespace
    (root with util-linux's `unshare` and `setpriv`), not only the limits."""
    return os.geteuid() == 0 and shutil.which("unshare") is not None


def run_python(code: str, stdin: str = "", limits: Limits | None = None) -> Outcome:
    """`code` run by this Python (`-I`: isolated from the environment and the
    user's site packages), confined."""
    python = os.path.join(sys.base_prefix, "bin", os.path.basename(os.path.realpath(
        sys.executable)))  # the interpreter itself, not a virtual environment's link
    return run([python, "-I", "-c", code], stdin, limits)


def run(argv: list[str], stdin: str = "", limits: Limits | None = None) -> Outcome:
    """`argv` run confined (the module's docstring) in a new, empty folder that is
    removed afterwards."""
    L = limits or Limits()
    folder = Path(tempfile.mkdtemp(prefix="verl-sandbox-"))
    t0 = time.monotonic()
    try:
        if confined():
            cmd = ["unshare", "--net", "--mount", "--pid", "--fork", "--kill-child",
                   "--mount-proc", sys.executable, "-I", str(JAIL), str(folder),
                   sys.base_prefix, str(L.cpu_s), str(L.memory_mb), str(L.file_mb),
                   str(L.processes), "--", *argv]
            proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, cwd=folder,
                                    start_new_session=True)
        else:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, cwd=folder,
                                    start_new_session=True,
                                    preexec_fn=lambda: _limits(L),  # noqa: PLW1509
                                    env={"PATH": "/usr/bin:/bin", "HOME": str(folder),
                                         "LANG": "C.UTF-8"})
        out, err, why = _collect(proc, stdin.encode(), L)
        rc = proc.wait()
        return Outcome(out.decode(errors="replace"), err.decode(errors="replace"),
                       None if why else rc, why or _exit_error(rc, err, L),
                       time.monotonic() - t0)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _limits(L: Limits) -> None:
    """In the child before it runs (no namespaces): the limits that need no root."""
    for what, value in ((resource.RLIMIT_CPU, L.cpu_s), (resource.RLIMIT_AS, L.memory_mb << 20),
                        (resource.RLIMIT_FSIZE, L.file_mb << 20), (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(what, (value, value + (what == resource.RLIMIT_CPU)))


def _collect(proc: subprocess.Popen[bytes], data: bytes,
             L: Limits) -> tuple[bytes, bytes, str]:
    """Feed stdin, read both pipes until they close, the deadline or the output
    cap; on either of the last two kill the call. (stdout, stderr, why killed)."""
    assert proc.stdin and proc.stdout and proc.stderr
    with contextlib.suppress(BrokenPipeError):
        proc.stdin.write(data)
    with contextlib.suppress(BrokenPipeError):
        proc.stdin.close()
    bufs = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    deadline = time.monotonic() + L.wall_s
    why = ""
    with selectors.DefaultSelector() as sel:
        for fd in bufs:
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map() and not why:
            left = deadline - time.monotonic()
            if left <= 0:
                why = f"timed out after {L.wall_s:g} s"
                break
            for key, _ in sel.select(left):
                chunk = os.read(key.fd, 65_536)
                if not chunk:
                    sel.unregister(key.fd)
                    continue
                bufs[key.fd] += chunk
                if len(bufs[key.fd]) > L.output_bytes:
                    why = f"output over {L.output_bytes} bytes"
    if why:
        _kill(proc)
    else:  # the pipes closed: the call is ending; still bounded
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            why = f"timed out after {L.wall_s:g} s"
            _kill(proc)
    out, err = (bytes(bufs[f.fileno()][:L.output_bytes]) for f in (proc.stdout, proc.stderr))
    proc.stdout.close()
    proc.stderr.close()
    return out, err, why


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """The call's whole session (and, confined, its PID namespace with it)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _exit_error(rc: int, err: bytes, L: Limits) -> str:
    """Why an exit was a failure, in a line a model can read back."""
    if rc == 0:
        return ""
    tail = err.decode(errors="replace").strip().splitlines()[-1:] or [""]
    if rc in (-signal.SIGXCPU, -signal.SIGKILL, 128 + signal.SIGXCPU, 128 + signal.SIGKILL) \
            and not tail[0]:
        return f"stopped: CPU time over {L.cpu_s} s"
    if rc in (-signal.SIGXFSZ, 128 + signal.SIGXFSZ):
        return f"stopped: a file over {L.file_mb} MB"
    if "MemoryError" in tail[0]:
        return f"stopped: memory over {L.memory_mb} MB ({tail[0][:200]})"
    return f"exit code {rc}" + (f": {tail[0][:300]}" if tail[0] else "")
