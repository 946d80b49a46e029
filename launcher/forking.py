"""The launcher's side of the fork server (`forkserver.py`): start it, ask it for
role processes, and hand each back as a `ForkedProcess`, which answers what the
supervisor asks of an `asyncio.subprocess.Process` (pid, returncode, wait,
stdin, send_signal)."""

from __future__ import annotations

import array
import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from verl_zmq.config import Job, Policy
from verl_zmq.config.algorithms import numpy_acting
from verl_zmq.config.roles import role_traits
from verl_zmq.forkserver import MAX_MSG
from verl_zmq.runner import resolve_cpus

from . import early
from .early import Early

POLL_S = 0.5  # how often roles are checked for their end once the server is lost
LOST_CODE = 1  # the exit code of a role whose end the lost server could not report


class PipeWriter:
    """The write end of a role's stdin: the job's bundle, then EOF when closed."""

    def __init__(self, fd: int):
        self.fd = fd

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:  # a bundle is a few kilobytes; the role reads it at once
            view = view[os.write(self.fd, view):]

    async def drain(self) -> None:
        return None

    def close(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1


class ForkedProcess:
    """A role forked by the fork server."""

    def __init__(self, pid: int, stdin: PipeWriter, loop: asyncio.AbstractEventLoop):
        self.pid = pid
        self.stdin = stdin
        self.returncode: int | None = None
        self._done = loop.create_future()

    def _exited(self, code: int) -> None:
        if self.returncode is None:
            self.returncode = code
            self.stdin.close()
            self._done.set_result(code)

    async def wait(self) -> int:
        return await asyncio.shield(self._done)

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:  # never a pid that may since belong to another
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)


# the cores a forked role starts from (the server may be pinned elsewhere)
LAUNCHER_CPUS = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


def own_cpus(specs: list[str]) -> list[int] | None:
    """The cores of the roles with these VERL_CPUS specs, together; None where one
    of them has none of its own (the zygote then runs where the OS puts it)."""
    own = [resolve_cpus(s, LAUNCHER_CPUS) for s in specs]
    if not specs or None in own:
        return None
    return sorted({c for cs in own if cs is not None for c in cs}) or None


class _Adopted:
    """A server started before the event loop (`early.py`), awaited as an
    `asyncio` process is."""

    def __init__(self, popen: subprocess.Popen[bytes]):
        self.popen = popen

    @property
    def pid(self) -> int:
        return self.popen.pid

    async def wait(self) -> int:
        while self.popen.poll() is None:
            await asyncio.sleep(0.05)
        return self.popen.returncode


class ForkServer:
    """A running fork server, or a lost one (`alive` False: spawn plainly)."""

    def __init__(self, proc: asyncio.subprocess.Process | _Adopted, sock: socket.socket):
        self.proc, self.sock = proc, sock
        self.ahead: Early | None = None  # started before the job was read
        self.loop = asyncio.get_running_loop()
        self.alive = True
        self.children: dict[int, ForkedProcess] = {}
        self.early: dict[int, int] = {}  # exits reported before their pid was taken
        self.replies: asyncio.Queue[Any] = asyncio.Queue()
        self.lock = asyncio.Lock()  # one request at a time: replies come in order
        self.loop.add_reader(sock.fileno(), self._readable)
        self.poller: asyncio.Task[None] | None = None
        self.torch = False  # the torch zygote: its children have torch imported

    @classmethod
    async def start(cls, err_path: Path, timeout_s: float = 60.0, torch: bool = False,
                    modules: tuple[str, ...] = (), cpus: list[int] | None = None
                    ) -> ForkServer | None:
        """Start the server (with `torch`, the torch zygote that forks the roles
        that import torch, preloading `modules` too), on `cpus` while it imports
        (its roles' own cores: the samplers step on the others), and wait for it to
        be ready; None when it cannot."""
        ahead = early.take(torch)
        if ahead is not None:
            ahead.hand_over(err_path)
            ours = ahead.sock
            with contextlib.suppress(OSError):  # gone: the ready wait says so
                ours.send(json.dumps({"modules": list(modules)}).encode())  # `--more`
            ours.setblocking(False)
            server = cls(_Adopted(ahead.proc), ours)
            server.ahead = ahead
        else:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            with open(err_path, "ab") as err:
                proc = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "verl_zmq.forkserver", str(theirs.fileno()),
                    *(["--torch", *modules] if torch else []),
                    pass_fds=[theirs.fileno()], stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.DEVNULL, stderr=err, start_new_session=True)
            theirs.close()
            ours.setblocking(False)
            server = cls(proc, ours)
        server.torch = torch
        if (cpus or (ahead is not None and torch)) and hasattr(os, "sched_setaffinity"):
            with contextlib.suppress(OSError):  # gone already: the ready wait says so
                os.sched_setaffinity(server.proc.pid, cpus or LAUNCHER_CPUS)
        try:
            async with asyncio.timeout(timeout_s):
                ready = await server.replies.get()
        except TimeoutError:
            ready = None
        if not ready or "ready" not in ready:
            server.close()
            return None
        return server

    def _readable(self) -> None:
        try:
            msg = self.sock.recv(MAX_MSG)
        except BlockingIOError:
            return
        except OSError:
            msg = b""
        if not msg:
            self._lost()
            return
        data = json.loads(msg)
        if "exit" in data:
            child = self.children.pop(data["exit"], None)
            if child is None:
                self.early[data["exit"]] = data["code"]
            else:
                child._exited(data["code"])
        else:
            self.replies.put_nowait(data)

    def _lost(self) -> None:
        """The server is gone: its roles run on; notice each one's end by polling."""
        if not self.alive:
            return
        self.alive = False
        self.loop.remove_reader(self.sock.fileno())
        self.replies.put_nowait(None)
        self.poller = self.loop.create_task(self._poll())

    async def _poll(self) -> None:
        while self.children:
            await asyncio.sleep(POLL_S)
            for pid in list(self.children):
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    self.children.pop(pid)._exited(LOST_CODE)

    async def spawn(self, argv: list[str], env: dict[str, str], out_fd: int, err_fd: int
                    ) -> ForkedProcess | None:
        """Fork a role for `argv` (a `python -m verl_zmq.cli` command line); None
        when the server is lost (the caller starts the role plainly)."""
        if not self.alive:
            return None
        r, w = os.pipe()
        async with self.lock:
            try:
                req = json.dumps({"argv": argv, "env": env, "cpus": LAUNCHER_CPUS}).encode()
                self.sock.sendmsg([req], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                           array.array("i", [r, out_fd, err_fd]))])
            except OSError:
                os.close(r)
                os.close(w)
                self._lost()
                return None
            os.close(r)
            reply = await self.replies.get()
        if not reply or "pid" not in reply:
            os.close(w)
            return None
        child = ForkedProcess(reply["pid"], PipeWriter(w), self.loop)
        if reply["pid"] in self.early:
            child._exited(self.early.pop(reply["pid"]))
        else:
            self.children[reply["pid"]] = child
        return child

    def close(self) -> None:
        """Let the server go (its socket's EOF ends it); the roles stop on their own."""
        if self.alive:
            self.alive = False
            self.loop.remove_reader(self.sock.fileno())
        self.sock.close()
        if self.poller is not None:
            self.poller.cancel()
        if self.ahead is not None:
            self.ahead.forget()


def forkable(argv: list[str]) -> bool:
    """A local `verl role` command line with our interpreter."""
    return argv[:3] == [sys.executable, "-m", "verl_zmq.cli"]


def from_zygote(job: Job, role: str) -> bool:
    """Whether `role` is forked from the torch zygote: it imports torch at its
    start (a trainer, or a sampler of a job whose policy does not act in numpy: a
    Hugging Face model, `sampling.inference = "torch"`), or it will need torch
    while the job runs: the evaluator, whose first best.pt is written by
    `torch.save` (imported there, seconds of a core, and no evaluation meanwhile).
    A `resources.<role>.memory` limit is set in the fork, which holds torch
    already: a fork over its limit fails at once and says so (`runner.limit_memory`)."""
    t = role_traits(role)
    return t.trains or t.writes_policy or (t.acts and not numpy_acting(job))


# what building a Hugging Face model and tokenizer and generating imports: seconds of
# a core in each role forked after it (four roles of a post-training job on two
# cores: five seconds before the first of them starts)
HF_MODULES = ("transformers", "transformers.activations", "transformers.masking_utils",
              "transformers.modeling_utils", "transformers.generation",
              "transformers.models.auto.modeling_auto",
              "transformers.models.auto.tokenization_auto", "tokenizers", "safetensors.torch",
              "verl_zmq.seq.hf", "verl_zmq.seq.hf_grpo")


def _model_type(pol: Policy) -> str:
    """The policy's `model_type` (its inline config's, or its folder's config.json);
    "" where neither says."""
    if pol.config.get("model_type"):
        return str(pol.config["model_type"])
    with contextlib.suppress(OSError, ValueError, AttributeError):
        return str(json.loads((Path(pol.path) / "config.json").read_text())["model_type"])
    return ""


def zygote_modules(job: Job) -> tuple[str, ...]:
    """What the torch zygote imports beyond torch: for a Hugging Face policy,
    transformers with its model's module (and peft). A name that does not import
    is skipped there, and fails in the role that needs it."""
    pol = job.algorithm.policy
    if pol.kind != "hf":
        return ()
    kind = _model_type(pol).replace("-", "_")
    own = (f"transformers.models.{kind}.modeling_{kind}",) if kind.isidentifier() else ()
    return (*HF_MODULES, *own, *(("peft",) if pol.lora_rank else ()))
