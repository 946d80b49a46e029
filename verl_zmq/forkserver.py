"""A fork server for the roles the launcher starts on its own host.

Eight interpreters that each import numpy, gymnasium, zmq and structlog (and
two of them torch) at once on a small machine spend seconds of CPU before the
first env step. The fork server imports them once and forks each local role
from that warm process, as multiprocessing's forkserver does with preloading:

- the launcher starts `python -m verl_zmq.forkserver FD` with one end of a
  SOCK_SEQPACKET socket pair; the server imports the torch-free role modules,
  then serves requests: a JSON message (the role's `verl_zmq.cli` argv, its
  environment) and three file descriptors passed along
  (SCM_RIGHTS: the read end of the role's stdin pipe, its log and its stderr);
- the server never imports torch, so a torch-free role forked later (a
  restarted sampler) carries none of torch's address space into its
  `resources.<role>.memory` limit; a second server started with `--torch` (the
  torch zygote) imports torch and the trainers' modules from the launcher's
  first moment, beside the first one and the samplers, and forks the roles
  that import torch at their start (learners, DAPO peers, their warm spares;
  samplers and the evaluator of a job that acts in torch) ready to run, with
  transformers too for a Hugging Face policy: importing torch is seconds of a
  core, which a learner forked after the import would spend before its first
  update (our optimiser does not import torch's compiler, which would double
  that: `algos/optim.py`). It
  forks only while it is one thread (torch starts none on import when BLAS is
  held to one thread, as `blas` does), so no lock is held across a fork;
- the child starts a session of its own, takes the three descriptors as 0, 1,
  2 and runs the same `verl role` entry point as an exec'd role would; the
  server answers the child's pid and, when it exits, its exit code (negative:
  the signal that killed it, as `asyncio` reports it);
- roles stop on their stdin's EOF as before, so the launcher going away stops
  them (no orphans); the server exits on its socket's EOF. When the server is
  lost the launcher notices each of its roles' ends by polling, and starts
  later roles as plain processes.

Only `verl_zmq.cli` command lines are forked; remote roles (SSH, Slurm) and any
other command are exec'd as before.
"""

from __future__ import annotations

import array
import contextlib
import json
import os
import select
import signal
import socket
import sys
from typing import Any

from . import blas  # noqa: F401  (before numpy: one BLAS thread per role process)

MAX_MSG = 1 << 20


def _preload(torch: bool, modules: list[str]) -> None:
    """What every role imports, torch excepted; with `torch`, torch too, what
    a trainer imports ahead of need (its `preload`) and `modules` (transformers
    for a Hugging Face policy)."""
    from verl_zmq.config.roles import FORKABLE_ROLES, TRAINER_ROLES
    from verl_zmq.roles.base import role_class

    for role in FORKABLE_ROLES:
        role_class(role)
    if torch:
        for role in TRAINER_ROLES:
            role_class(role).preload()
        _import(modules)
    import ctypes  # noqa: F401 - each child names itself with it

    import verl_zmq.cli  # noqa: F401
    import verl_zmq.runner  # noqa: F401


def _import(modules: list[str]) -> None:
    """Import `modules`; one that does not import is skipped (the role that needs
    it says why)."""
    import importlib

    for name in modules:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


def _child(req: dict[str, Any], fds: list[int], sock: socket.socket, wake_r: int,
           wake_w: int) -> None:
    """In the forked child: become the role; never returns."""
    import io
    import traceback

    code = 1
    try:
        os.setsid()
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sock.close()
        os.close(wake_r)
        os.close(wake_w)
        for i, fd in enumerate(fds):
            os.dup2(fd, i)
            os.close(fd)
        os.environ.clear()
        os.environ.update(req["env"])
        if req.get("cpus") and hasattr(os, "sched_setaffinity"):
            # the launcher's cores, not the server's (the zygote runs on the trainers'):
            # the role pins itself from there (`runner.pin`)
            with contextlib.suppress(OSError):
                os.sched_setaffinity(0, req["cpus"])
        sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)))
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True)
        argv = req["argv"]
        sys.argv = [argv[2], *argv[3:]]
        _name(argv)
        from verl_zmq.cli import main

        main(args=argv[3:], prog_name="verl", standalone_mode=True)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # the role could not start: say why where its errors go
        traceback.print_exc()
    finally:
        for f in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # exiting either way
                f.flush()
        os._exit(code)


def _name(argv: list[str]) -> None:
    """The process's name (what `top` and `ps -o comm` show) is its member id: its
    command line is the fork server's."""
    import ctypes

    name = argv[argv.index("--id") + 1] if "--id" in argv else argv[4]
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        sock.send(json.dumps({"exit": pid, "code": os.waitstatus_to_exitcode(status)}).encode())


def _threads() -> int:
    """This process's threads (1 where /proc cannot say)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def _more(sock: socket.socket) -> list[str]:
    """Started before the job was read (`--more`): the modules it needs beyond
    ours, from the launcher's first message; its socket's EOF (a job that does not
    use this server) ends it."""
    msg = sock.recv(MAX_MSG)
    if not msg:
        os._exit(0)
    return [str(m) for m in json.loads(msg).get("modules", [])]


def serve(fd: int, torch: bool = False, modules: list[str] | None = None,
          more: bool = False) -> None:
    sock = socket.socket(fileno=fd)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher decides when roles stop
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes select through wake_w
    _preload(torch, modules or [])
    if more:
        _import(_more(sock))
    if not torch and "torch" in sys.modules:  # a role module began to import it
        sys.exit("fork server: torch was imported while preloading")
    if _threads() != 1:  # a fork would copy a lock another thread may hold
        sys.exit(f"fork server: {_threads()} threads after preloading; forking needs one")
    try:
        sock.send(json.dumps({"ready": os.getpid()}).encode())
    except BrokenPipeError:  # the launcher let it go before it was ready (`launcher/early.py`)
        os._exit(0)
    while True:
        waits: list[Any] = [sock, wake_r]
        ready, _, _ = select.select(waits, [], [])
        if wake_r in ready:
            os.read(wake_r, 4096)
        _reap(sock)
        if sock not in ready:
            continue
        fds = array.array("i")
        msg, anc, _, _ = sock.recvmsg(MAX_MSG, socket.CMSG_SPACE(3 * fds.itemsize))
        if not msg:  # the launcher is gone; the roles stop on their stdin's EOF
            # no interpreter teardown: with torch loaded it takes a second or more,
            # which the launcher would wait out at the end of every job
            os._exit(0)
        for level, kind, data in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
        req = json.loads(msg)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(req, list(fds), sock, wake_r, wake_w)
        for f in fds:
            os.close(f)
        sock.send(json.dumps({"pid": pid}).encode())


if __name__ == "__main__":
    # FD [--more] [--torch [MODULE...]]
    flags = sys.argv[2:]
    more = "--more" in flags
    if more:
        flags.remove("--more")
    serve(int(sys.argv[1]), torch="--torch" in flags, modules=flags[1:], more=more)
