"""The torch zygote started at `verl-launch`'s first moment (`entry.py`).

The torch zygote (`verl_zmq/forkserver.py --torch`) imports the same modules
whatever the job (torch and the trainers' modules), so it need not wait for the
launcher to import itself, read the job and plan it (about half a second of a
core): `entry.main` starts it before importing the rest of the launcher, and the
supervisor takes it over (`take`) where it would start its own, and sends it
the modules the job needs beyond those (`--more`: a Hugging Face policy's). A
job whose roles are all remote, or with `launch.fork_server = false`, lets it
go; a dry run, `--help`, `--version`, Kubernetes manifests and a Slurm
allocation (roles started by srun) start none. The torch-free fork server is
not started this way: it imports in half a second, and a third process
importing beside the launcher and the zygote slowed the launcher itself on two
cores (the samplers wait for it).

Standard library only: importing it costs nothing before the servers start.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

NO_JOB = {"--help", "-h", "--version", "--dry-run"}  # arguments that start no job
NO_LOCAL = {"k8s", "slurm"}  # hosts arguments whose roles never run here


@dataclass
class Early:
    """A fork server started before the job was read: its process, the launcher's
    end of its socket, and the temporary file its stderr goes to."""

    proc: subprocess.Popen
    sock: socket.socket
    err: Path

    def hand_over(self, err_path: Path) -> None:
        """The server's stderr moves to the run folder's error file (on another
        file system: what it wrote so far is copied, and the rest stays in `err`)."""
        try:
            os.replace(self.err, err_path)
            self.err = err_path
        except OSError:
            with contextlib.suppress(OSError):
                shutil.copyfile(self.err, err_path)

    def forget(self) -> None:
        """The temporary error file, where it is empty (the server runs on)."""
        with contextlib.suppress(OSError):
            if self.err.name.startswith("verl-forkserver-") and self.err.stat().st_size == 0:
                self.err.unlink()

    def close(self) -> None:
        """Stop a server no one took: it forked nothing, so it is killed outright
        (its socket's EOF would end it only once its imports are done: a launch
        refused for bad input would wait for them)."""
        self.sock.close()
        with contextlib.suppress(OSError):
            self.proc.kill()
        self.proc.wait()
        self.forget()


_zygote: Early | None = None  # started, not yet taken
_released: list[Early] = []  # let go, to be reaped


def _spawn() -> Early:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    fd, name = tempfile.mkstemp(prefix="verl-forkserver-", suffix=".err")
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "verl_zmq.forkserver", str(theirs.fileno()), "--more",
             "--torch"],
            pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=fd, start_new_session=True)
    finally:
        os.close(fd)
        theirs.close()
    if hasattr(os, "sched_setaffinity"):
        # where learners' own cores are (counted from the last; launcher/affinity.py),
        # away from the launcher's start: the supervisor pins it for the job it reads
        with contextlib.suppress(OSError):
            cpus = sorted(os.sched_getaffinity(0))
            if len(cpus) > 1:
                os.sched_setaffinity(proc.pid, cpus[-1:])
    return Early(proc, ours, Path(name))


def start(argv: list[str]) -> None:
    """Start the zygote unless `argv` starts no job with local roles."""
    global _zygote
    if not argv or NO_JOB & set(argv) or argv[0] in NO_LOCAL:
        return
    with contextlib.suppress(OSError):
        _zygote = _spawn()


def take() -> Early | None:
    """The zygote started early, once; None when none was."""
    global _zygote
    out, _zygote = _zygote, None
    return out


def release() -> None:
    """Let a zygote no one took go, without waiting for it (still importing, it
    reads its socket's EOF once done); `close` reaps it."""
    if (e := take()) is not None:
        e.sock.close()
        _released.append(e)


def close() -> None:
    """Stop and reap a zygote no one took."""
    release()
    while _released:
        _released.pop().close()
