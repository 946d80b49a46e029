"""The actor that runs one role's process on the Ray node it was placed on
(`launcher/ray_step.py` places it and pipes to it). Imported by Ray's workers by
reference: verl-zmq is installed on every node, as on any host of a job."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

POLL_S = 0.5  # the longest a poll waits in the actor for output


class _Stream:
    """Bytes a role wrote and nobody has taken yet (one per output stream)."""

    def __init__(self) -> None:
        self.buf = bytearray()


class RoleActor:
    """Runs one role's process on the node Ray put this actor on. Its methods are
    called from the driver (`run` below) through Ray; `poll` may wait while
    `write`, `close_stdin` and `signal` come in (a threaded actor)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.out, self.err = _Stream(), _Stream()
        self.cond = threading.Condition()

    def start(self, argv: list[str], env: dict[str, str]) -> dict[str, Any]:
        """Start the role: `--bind` becomes this node's address (the role may have
        been moved here), and an interpreter this node lacks becomes the one Ray
        runs here. Returns where it runs."""
        import ray

        ip = str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]
        argv = list(argv)
        if "--bind" in argv:
            argv[argv.index("--bind") + 1] = ip
        if not (os.path.isfile(argv[0]) and os.access(argv[0], os.X_OK)):
            argv[0] = sys.executable
        child_env = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
        gpus = ray.get_gpu_ids()
        child_env["CUDA_VISIBLE_DEVICES"] = ",".join(str(int(g)) for g in gpus)
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=child_env,
                                     start_new_session=True)
        for src, dst in ((self.proc.stdout, self.out), (self.proc.stderr, self.err)):
            threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()
        return {"ip": ip, "node": ray.get_runtime_context().get_node_id(),
                "pid": self.proc.pid}

    def _pump(self, src: Any, dst: _Stream) -> None:
        for chunk in iter(lambda: src.read1(65536), b""):
            with self.cond:
                dst.buf += chunk
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def poll(self) -> tuple[bytes, bytes, int | None]:
        """(new stdout, new stderr, the exit code once it exited and its output is
        all taken); waits up to POLL_S for something new."""
        assert self.proc is not None
        with self.cond:
            if not (self.out.buf or self.err.buf) and self.proc.poll() is None:
                self.cond.wait(POLL_S)
            out, err = bytes(self.out.buf), bytes(self.err.buf)
            self.out.buf.clear()
            self.err.buf.clear()
        rc = self.proc.poll()
        if rc is not None and (out or err):
            rc = None  # the driver asks again for what may still be in the pipes
        elif rc is not None:
            time.sleep(0.05)  # the pumps' last read after the exit
            with self.cond:
                if self.out.buf or self.err.buf:
                    rc = None
        return out, err, rc

    def write(self, data: bytes) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass  # it ended: poll says how

    def close_stdin(self) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        with contextlib.suppress(BrokenPipeError, ValueError):
            self.proc.stdin.close()

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
