"""Hosts as Linux network namespaces on this machine, for fault tests and
tools/faults/scenarios.py: host 0 and each other host are joined by a veth pair (host i
is 10.77.i.2, host 0's end of its link 10.77.i.1; host 0 routes between the
others, so every host reaches every other), every host runs its own
sshd on port 22, and the launcher runs inside host 0. A partition is a link
brought down; a lost host is one whose every process is killed and whose link
is down, until it "boots" again (link up, a fresh sshd).

Only namespaces and addresses this lab creates are ever used; everything is
removed by `close()`. Needs root (`ip netns`), sshd and the ssh client.

    with Lab(tmp, hosts=2) as lab:
        subprocess.Popen([*lab.wrap(0), python, "-m", "launcher.cli", ...])  # in host 0
        lab.partition(1); ...; lab.heal(1)
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Self

SSH_OPTIONS = ("-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
               "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=5")


def unavailable() -> str:
    """Why namespace hosts cannot be made here, or empty."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed"
    if shutil.which("sshd") is None and not Path("/usr/sbin/sshd").exists():
        return "sshd is not installed (apt-get install openssh-server)"
    return namespaces_refused()


def namespaces_refused() -> str:
    """Why this process may not make a network namespace (a probe made and
    removed), or empty."""
    name = f"vzprobe{uuid.uuid4().hex[:6]}"
    r = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if r.returncode:
        return f"`ip netns add` is not permitted here: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return ""


def write_sshd_files(tmp: Path, listen: list[str], port: int) -> tuple[Path, Path]:
    """Host key, client key, authorized_keys and an sshd_config in `tmp` for a test
    sshd listening on `listen`:`port`; returns (config, client key)."""
    tmp.mkdir(parents=True, exist_ok=True)
    os.chmod(tmp, 0o700)
    host_key, key = tmp / "host_ed25519", tmp / "id_ed25519"
    for k in (host_key, key):
        if not k.exists():
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(k)],
                           check=True)
    (tmp / "authorized_keys").write_text((tmp / "id_ed25519.pub").read_text())
    os.chmod(tmp / "authorized_keys", 0o600)
    conf = tmp / "sshd_config"
    conf.write_text("\n".join([
        f"Port {port}", *[f"ListenAddress {a}" for a in listen],
        f"HostKey {host_key}", f"AuthorizedKeysFile {tmp / 'authorized_keys'}",
        f"PidFile {tmp / 'sshd.pid'}", "UsePAM no", "PasswordAuthentication no",
        "KbdInteractiveAuthentication no", "StrictModes no", "PermitRootLogin yes",
        "MaxStartups 100:30:200", "MaxSessions 100", "LogLevel ERROR", ""]))
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)
    return conf, key


def _ip(*args: str, ns: str | None = None) -> None:
    argv = ["ip", *(["-n", ns] if ns else []), *args]
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"{' '.join(argv)}: {r.stderr.strip()}")


class Managed:
    """Brought up on entering a `with` block, torn down on leaving it, and torn down
    too when bringing it up failed half way (whatever it made is removed)."""

    def up(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            self.up()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def join(hub: str, spoke: str, i: int, hub_end: str, spoke_end: str) -> None:
    """A veth pair between namespaces `hub` (10.77.i.1 on `hub_end`) and `spoke`
    (10.77.i.2 on `spoke_end`), up, and the spoke's default route through the hub."""
    _ip("link", "add", hub_end, "netns", hub, "type", "veth", "peer", "name", spoke_end,
        "netns", spoke)
    _ip("addr", "add", f"10.77.{i}.1/24", "dev", hub_end, ns=hub)
    _ip("addr", "add", f"10.77.{i}.2/24", "dev", spoke_end, ns=spoke)
    _ip("link", "set", hub_end, "up", ns=hub)
    _ip("link", "set", spoke_end, "up", ns=spoke)
    _ip("route", "add", "default", "via", f"10.77.{i}.1", ns=spoke)


def namespace_pids(name: str) -> list[int]:
    """The processes in network namespace `name`."""
    r = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True)
    return [int(p) for p in r.stdout.split()]


def kill_namespace(name: str) -> list[int]:
    """SIGKILL every process in network namespace `name`; their pids."""
    pids = namespace_pids(name)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pids


class Lab(Managed):
    """`hosts` network namespaces joined to host 0, each with an sshd."""

    def __init__(self, tmp: Path, hosts: int = 2):
        self.tmp = Path(tmp)
        self.tag = uuid.uuid4().hex[:5]
        self.names = [f"vz{self.tag}h{i}" for i in range(hosts)]
        self.addresses = ["10.77.1.1"] + [f"10.77.{i}.2" for i in range(1, hosts)]
        self.sshd: dict[int, subprocess.Popen] = {}
        self.key = self.tmp / "ssh" / "id_ed25519"

    # -- building and tearing down ------------------------------------------------

    def _link(self, i: int) -> tuple[str, str]:
        return f"vz{self.tag}a{i}", f"vz{self.tag}b{i}"  # host 0's end, host i's end

    def up(self) -> None:
        for name in self.names:
            _ip("netns", "add", name)
            _ip("link", "set", "lo", "up", ns=name)
        for i in range(1, len(self.names)):
            # host 0 answers on its first address from every link (Linux accepts a
            # local address on any interface); host i reaches it through its link
            join(self.names[0], self.names[i], i, *self._link(i))
        # host 0 routes between the others (a new namespace does not forward): host i
        # reaches host j through it, as machines on one switch reach each other
        r = subprocess.run(["ip", "netns", "exec", self.names[0], "sysctl", "-qw",
                            "net.ipv4.ip_forward=1"], capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError(f"forwarding in {self.names[0]}: {r.stderr.strip()}")
        write_sshd_files(self.tmp / "ssh", ["0.0.0.0"], 22)
        for i in range(len(self.names)):
            self.start_sshd(i)

    def start_sshd(self, i: int) -> None:
        sshd = shutil.which("sshd") or "/usr/sbin/sshd"
        log = open(self.tmp / "ssh" / f"sshd-{i}.log", "ab")  # noqa: SIM115
        self.sshd[i] = subprocess.Popen(
            ["ip", "netns", "exec", self.names[i], sshd, "-D", "-e", "-f",
             str(self.tmp / "ssh" / "sshd_config"), "-o", f"PidFile={self.tmp}/ssh/sshd-{i}.pid"],
            stdout=subprocess.DEVNULL, stderr=log)
        log.close()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            r = self.exec(0, ["ssh", *self.ssh_options, "-o", "BatchMode=yes",
                              self.addresses[i], "true"], capture_output=True, timeout=15)
            if r.returncode == 0:
                return
            time.sleep(0.3)
        raise RuntimeError(f"sshd on {self.addresses[i]} did not come up")

    def close(self) -> None:
        for name in self.names:
            self.kill_all(name)
            subprocess.run(["ip", "netns", "del", name], capture_output=True)

    # -- using it -------------------------------------------------------------------

    @property
    def ssh_options(self) -> list[str]:
        return ["-i", str(self.key), *SSH_OPTIONS]

    def wrap(self, i: int) -> list[str]:
        """The command prefix that runs a command inside host i."""
        return ["ip", "netns", "exec", self.names[i]]

    def job_overrides(self, python: str, workdir: str) -> list[str]:
        """`--set` overrides a job needs to reach the lab's hosts over SSH."""
        import json

        return [f"launch.ssh_options={json.dumps(self.ssh_options)}",
                f'launch.python="{python}"', f'launch.workdir="{workdir}"']

    def exec(self, i: int, argv: list[str], **kw) -> subprocess.CompletedProcess:
        """Run `argv` inside host i to its end (`subprocess.run` keywords)."""
        return subprocess.run([*self.wrap(i), *argv], **kw)

    def partition(self, i: int) -> None:
        """Host i and host 0 stop reaching each other (host i's link goes down)."""
        _ip("link", "set", self._link(i)[0], "down", ns=self.names[0])

    def heal(self, i: int) -> None:
        _ip("link", "set", self._link(i)[0], "up", ns=self.names[0])

    def pids(self, name: str) -> list[int]:
        return namespace_pids(name)

    def strays(self, i: int) -> list[str]:
        """What runs in host i besides its sshd: "pid command line" each."""
        keep = self.sshd[i].pid if i in self.sshd else None
        out = []
        for pid in self.pids(self.names[i]):
            if pid == keep:
                continue
            try:
                args = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue  # gone meanwhile
            out.append(f"{pid} {args.decode(errors='replace').strip()}"[:200])
        return out

    def kill_all(self, name: str) -> list[int]:
        return kill_namespace(name)

    def lose(self, i: int) -> list[int]:
        """Host i crashes: its link goes down and every process in it dies."""
        self.partition(i)
        self.sshd.pop(i, None)
        return self.kill_all(self.names[i])

    def boot(self, i: int) -> None:
        """Host i answers again: its link is up and a fresh sshd runs."""
        self.heal(i)
        self.start_sshd(i)
