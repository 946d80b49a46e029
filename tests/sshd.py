"""A real OpenSSH server on loopback aliases, started by the tests themselves:
its own host key, client key, authorized_keys, pid file and a free high port."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tools.hosts.netns import SSH_OPTIONS, write_sshd_files

ADDRESSES = ("127.0.0.2", "127.0.0.3", "127.0.0.4")


@dataclass
class Sshd:
    """A running sshd and what a client needs to reach it."""

    port: int
    key: Path
    proc: subprocess.Popen

    @property
    def ssh_options(self) -> list[str]:
        return ["-i", str(self.key), *SSH_OPTIONS]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def unavailable() -> str:
    """Why a test sshd cannot run here, or empty."""
    if shutil.which("sshd") is None and not Path("/usr/sbin/sshd").exists():
        return "sshd is not installed (apt-get install openssh-server)"
    if shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        return "the ssh client is not installed (apt-get install openssh-client)"
    if os.geteuid() != 0:
        return "a test sshd on loopback aliases needs root"
    return ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.2", 0))
        return s.getsockname()[1]


def start_sshd(tmp: Path) -> Sshd:
    port = _free_port()
    conf, key = write_sshd_files(tmp, list(ADDRESSES), port)
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    proc = subprocess.Popen([sshd, "-D", "-e", "-f", str(conf)], stdout=subprocess.DEVNULL,
                            stderr=open(tmp / "sshd.log", "ab"))  # noqa: SIM115
    s = Sshd(port, key, proc)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        r = subprocess.run(["ssh", *s.ssh_options, "-o", "BatchMode=yes", "-p", str(port),
                            ADDRESSES[0], "true"], capture_output=True, timeout=15)
        if r.returncode == 0:
            return s
        if proc.poll() is not None:
            break
        time.sleep(0.3)
    s.stop()
    raise RuntimeError(f"test sshd did not come up: {(tmp / 'sshd.log').read_text()[-2000:]}")
