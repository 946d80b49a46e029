"""The registry's port when it runs on this machine: free, and kept for the job.

Every other role binds a free port of `launch.port_range` itself; the registry's
port must be known before any role starts (it is on every role's command line).
With `launch.registry_port = 0` a local registry gets the range's first port
that no other job holds, tried in order from the first, so two jobs started
together each find their own. A launcher keeps the port it chose for the job's
whole life with an exclusive lock on a file named after it (in the temporary
folder, `verl-zmq-ports/`), which every launcher on the machine takes before
it probes a port: a bind with SO_REUSEADDR, as the registry's own, which a
listener refuses and a closed connection's TIME_WAIT does not. An explicit
`registry_port` that is taken is an error naming the run that holds it, where
a run folder says so. A remote registry gets the explicit port or the range's
first, unprobed.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import tempfile
from pathlib import Path

from verl_zmq.config import Job
from verl_zmq.config.roles import role_traits

from .hosts import Host
from .plan import Placement

LOCKS = Path(tempfile.gettempdir()) / "verl-zmq-ports"
NO_LOCKS = -1  # the lock folder cannot be used: the probe alone decides


class PortTaken(Exception):
    """An explicit registry port another process holds; the message says which."""


def _lock(port: int, owner: str) -> int | None:
    """A file descriptor holding `port`'s lock, with `owner` (the run folder)
    written in it; NO_LOCKS where locks cannot be taken here, or None when another
    launcher holds it."""
    try:
        LOCKS.mkdir(exist_ok=True)
        with contextlib.suppress(OSError):  # shared by every user of the machine
            os.chmod(LOCKS, 0o1777)
        fd = os.open(LOCKS / f"{port}.lock", os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        return NO_LOCKS
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, owner.encode(), 0)
    return fd


def _holder(port: int) -> str:
    """What holds `port`, as far as its lock file says."""
    try:
        with open(LOCKS / f"{port}.lock") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
            return "another process"  # no launcher holds its lock
    except BlockingIOError:
        with contextlib.suppress(OSError), open(LOCKS / f"{port}.lock") as f:
            return f"the job of run folder {f.read().strip() or '?'}"
    except OSError:
        pass
    return "another process"


def _free(address: str, port: int) -> bool:
    """Whether the registry could bind (address, port) now."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((address.strip("[]"), port))
        except OSError as e:
            if e.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def registry_host(job: Job, hosts: list[Host], placements: list[Placement]) -> Host:
    reg = next(p for p in placements if role_traits(p.role).rendezvous)
    return hosts[reg.host]


def choose_registry_port(job: Job, host: Host, hold: bool, owner: str = ""
                         ) -> tuple[int, int | None]:
    """(the registry's port, the lock keeping it or None); `owner`: the run folder,
    for another launcher's error. `hold` False (a dry run) probes and lets go.
    PortTaken for an explicit port that is taken."""
    explicit = job.launch.registry_port
    if not host.is_local:
        return job.registry_port, None
    lo, hi = job.launch.port_range
    for port in [explicit] if explicit else range(lo, hi + 1):
        lock = _lock(port, owner)
        if lock is None:
            continue
        try:
            free = _free(host.bind_address, port)
        except OSError:  # this address cannot be bound here at all: the role will say why
            free = True
        if free and hold:
            return port, lock
        release(lock)
        if free:
            return port, None
    if explicit:
        raise PortTaken(f"launch.registry_port {explicit} is taken on this machine by "
                        f"{_holder(explicit)}: stop it, choose another port, or set "
                        f"launch.registry_port = 0 (a free one)")
    raise PortTaken(f"launch.port_range {lo}-{hi}: every port is taken on this machine; "
                    f"widen the range")


def release(lock: int | None) -> None:
    """Let another launcher have the port (the lock file stays, unlocked)."""
    if lock is not None and lock != NO_LOCKS:
        with contextlib.suppress(OSError):
            os.close(lock)
