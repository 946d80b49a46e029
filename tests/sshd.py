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

ADDRESSES = ("127.0.0.2", "127.0.0.3", "127.0.0.4")


@dataclass
class Sshd:
    """A running sshd and what a client needs to reach it."""

    port: int
    key: Path
    proc: subprocess.Popen

    @property
    def ssh_options(self) -> list[str]:
        return ["-i", str(self.key), "-o", "StrictHostKeyChecking=no", "-o",
                "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o",
                "ConnectTimeout=5"]

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
    tmp.mkdir(parents=True, exist_ok=True)
    os.chmod(tmp, 0o700)
    host_key, key = tmp / "host_ed25519", tmp / "id_ed25519"
    for k in (host_key, key):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(k)], check=True)
    (tmp / "authorized_keys").write_text((tmp / "id_ed25519.pub").read_text())
    os.chmod(tmp / "authorized_keys", 0o600)
    port = _free_port()
    conf = tmp / "sshd_config"
    conf.write_text("\n".join([
        f"Port {port}", *[f"ListenAddress {a}" for a in ADDRESSES],
        f"HostKey {host_key}", f"AuthorizedKeysFile {tmp / 'authorized_keys'}",
        f"PidFile {tmp / 'sshd.pid'}", "UsePAM no", "PasswordAuthentication no",
        "KbdInteractiveAuthentication no", "StrictModes no", "PermitRootLogin yes",
        "MaxStartups 100:30:200", "MaxSessions 100", "LogLevel ERROR", ""]))
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)
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
