"""The fork servers started at `verl-launch`'s first moment (`entry.py`).

Both fork servers (`verl_zmq/forkserver.py`) import the same modules whatever
the job: the torch-free one the roles' modules (numpy, gymnasium, zmq), the
torch zygote (`--torch`) torch and the trainers' modules too. So they need not
wait for the launcher to import itself, read the job, check it and plan it
(half a second of a core): `entry.main` starts them before importing the rest
of the launcher, and the supervisor takes each over (`take`) where it would
start its own, and sends it the modules the job needs beyond those (`--more`:
a Hugging Face policy's, to the zygote). The launcher itself imports neither
numpy nor gymnasium before it checks the job, nor TensorBoard's writer before
the job runs (`ops/tb.py`), so on two cores the three importing together leave
the samplers' first env step earlier than the launcher and the torch-free
server importing one after the other (`tools/bench/startup.py`). A job whose
roles are all remote, or with `launch.fork_server = false`, lets them go; a dry
run, `--help`, `--version`, Kubernetes manifests and a Slurm allocation (roles
started by srun) start none.

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

    proc: subprocess.Popen[bytes]
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


_ahead: dict[bool, Early] = {}  # started, not yet taken: the zygote at True
_released: list[Early] = []  # let go, to be reaped


def _spawn(torch: bool) -> Early:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    fd, name = tempfile.mkstemp(prefix="verl-forkserver-", suffix=".err")
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "verl_zmq.forkserver", str(theirs.fileno()), "--more",
             *(["--torch"] if torch else [])],
            pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=fd, start_new_session=True)
    finally:
        os.close(fd)
        theirs.close()
    if torch and hasattr(os, "sched_setaffinity"):
        # where learners' own cores are (counted from the last; launcher/affinity.py),
        # away from the launcher's start: the supervisor pins it for the job it reads
        with contextlib.suppress(OSError):
            cpus = sorted(os.sched_getaffinity(0))
            if len(cpus) > 1:
                os.sched_setaffinity(proc.pid, cpus[-1:])
    return Early(proc, ours, Path(name))


def start(argv: list[str]) -> None:
    """Start both servers unless `argv` starts no job with local roles."""
    if not argv or NO_JOB & set(argv) or argv[0] in NO_LOCAL:
        return
    for torch in (True, False):
        with contextlib.suppress(OSError):
            _ahead[torch] = _spawn(torch)


def take(torch: bool = True) -> Early | None:
    """The zygote (or with `torch` False the torch-free server) started early,
    once; None when none was."""
    return _ahead.pop(torch, None)


def release() -> None:
    """Let the servers no one took go, without waiting for them (still importing,
    they read their socket's EOF once done); `close` reaps them."""
    for torch in (True, False):
        if (e := take(torch)) is not None:
            e.sock.close()
            _released.append(e)


def close() -> None:
    """Stop and reap the servers no one took."""
    release()
    while _released:
        _released.pop().close()
