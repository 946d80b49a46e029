"""Hosts: a hosts file, `local`, `slurm` (the current allocation's nodes, where
roles start as job steps through `srun`), or `ray` (a Ray cluster's nodes, where
roles start as actors: ray_target.py).

Hosts file: one host a line,
    [user@]host[:port] [slots=N] [gpus=N] [roles=a,b,...] [python=PATH] [workdir=PATH]
with `#` comments and blank lines. Errors name the file and the line.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verl_zmq.config.roles import ROLES

LOCAL_NAMES = ("localhost", "127.0.0.1")


class HostsError(Exception):
    """A hosts file (or Slurm environment) that cannot be used; says where and why."""


@dataclass(frozen=True)
class Host:
    """One machine the job may use, and how to reach it."""

    address: str
    user: str = ""
    port: int = 0  # 0: ssh's default (or ~/.ssh/config)
    slots: int = 0  # 0: no limit
    gpus: int = -1  # GPUs the host has; -1: not stated (GPU roles are not bounded)
    roles: tuple[str, ...] = ()  # empty: any role
    python: str = ""
    workdir: str = ""
    # how roles start there: "ssh", "srun" (a node of the Slurm allocation we run in:
    # roles are job steps, so Slurm accounts, confines and cleans them up), or "ray"
    # (a node of a Ray cluster: roles are actors, launcher/ray_target.py)
    via: str = "ssh"
    # the Slurm node name (srun --nodelist) where `address` is its NodeAddr; a Ray
    # node's id
    node: str = ""
    cluster: str = ""  # via "ray": the cluster's address
    line: int = 0
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def is_local(self) -> bool:
        """localhost and 127.0.0.1 run without SSH or srun; every other address goes
        through one of them."""
        return self.address in LOCAL_NAMES and not self.user and not self.port \
            and self.via == "ssh"

    @property
    def by_ssh(self) -> bool:
        return not self.is_local and self.via == "ssh"

    @property
    def ssh_target(self) -> str:
        return f"{self.user}@{self.address}" if self.user else self.address

    @property
    def bind_address(self) -> str:
        return "127.0.0.1" if self.address == "localhost" else self.address

    def allows(self, role: str) -> bool:
        return not self.roles or role in self.roles


_HOST_RE = re.compile(r"^(?:(?P<user>[A-Za-z0-9._-]+)@)?(?P<host>[A-Za-z0-9._-]+|\[[0-9a-fA-F:]+\])"
                      r"(?::(?P<port>[^:]+))?$")


def _option(opt: str, where: str) -> dict[str, Any]:
    """One `key=value` of a hosts line, checked."""
    key, eq, value = opt.partition("=")
    if not eq or not value:
        raise HostsError(f"{where}: option {opt!r} is not key=value")
    if key == "slots":
        if not value.isdigit() or int(value) < 1:
            raise HostsError(f"{where}: slots={value!r}: expected a positive integer")
        return {"slots": int(value)}
    if key == "gpus":
        if not value.isdigit():
            raise HostsError(f"{where}: gpus={value!r}: expected a whole number")
        return {"gpus": int(value)}
    if key == "roles":
        roles = tuple(r.strip() for r in value.split(",") if r.strip())
        bad = [r for r in roles if r not in ROLES]
        if bad or not roles:
            what = f"unknown role {bad[0]!r}" if bad else "no role named"
            raise HostsError(f"{where}: roles={value!r}: {what}; roles are "
                             f"{', '.join(ROLES)}")
        return {"roles": roles}
    if key in ("python", "workdir"):
        return {key: value}
    import difflib

    close = difflib.get_close_matches(key, ["slots", "gpus", "roles", "python", "workdir"], 1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise HostsError(f"{where}: unknown option {key!r}{hint}; options are slots=, gpus=, "
                     f"roles=, python=, workdir=")


def parse_hosts(text: str, source: str = "<hosts>") -> list[Host]:
    hosts: list[Host] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"{source}:{n}"
        first, *opts = line.split()
        m = _HOST_RE.match(first)
        if not m:
            raise HostsError(f"{where}: {first!r} is not [user@]host[:port]")
        port = 0
        if m.group("port") is not None:
            p = m.group("port")
            if not p.isdigit() or not 1 <= int(p) <= 65535:
                raise HostsError(f"{where}: port {p!r} is not a number from 1 to 65535")
            port = int(p)
        kw: dict[str, Any] = {}
        for opt in opts:
            kw.update(_option(opt, where))
        hosts.append(Host(address=m.group("host").strip("[]"), user=m.group("user") or "",
                          port=port, line=n, **kw))
    if not hosts:
        raise HostsError(f"{source}: no hosts (every line is blank or a comment)")
    return hosts


def expand_nodelist(spec: str) -> list[str]:
    """Expand Slurm's compressed node list (`node[01-04,07],gpu5`) without Slurm tools."""
    names: list[str] = []
    buf, depth, parts = "", 0, []
    for ch in spec:  # split on commas outside brackets
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(buf)
            buf = ""
        else:
            buf += ch
    parts.append(buf)
    for part in (p.strip() for p in parts):
        if not part:
            continue
        m = re.fullmatch(r"([^\[]*)\[([^\]]+)\](.*)", part)
        if not m:
            names.append(part)
            continue
        prefix, ranges, suffix = m.groups()
        for r in ranges.split(","):
            lo, dash, hi = r.partition("-")
            if not lo.isdigit() or (dash and not hi.isdigit()):
                raise HostsError(f"SLURM_JOB_NODELIST: bad range {r!r} in {spec!r}")
            width = len(lo)
            for k in range(int(lo), int(hi if dash else lo) + 1):
                names.extend(expand_nodelist(f"{prefix}{k:0{width}d}{suffix}"))
    return names


def slurm_hosts(environ: Mapping[str, str] | None = None) -> list[Host]:
    env = os.environ if environ is None else environ
    spec = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not spec:
        raise HostsError("slurm: SLURM_JOB_NODELIST is not set (run inside an allocation)")
    slots = 0
    per = env.get("SLURM_NTASKS_PER_NODE") or env.get("SLURM_CPUS_ON_NODE") or ""
    m = re.match(r"(\d+)", per)
    if m:
        slots = int(m.group(1))
    names = expand_nodelist(spec)
    addr = node_addresses(names)
    return [Host(address=addr.get(n, n), node=n, slots=slots, via="srun", line=i + 1)
            for i, n in enumerate(names)]


def node_addresses(names: list[str]) -> dict[str, str]:
    """Each Slurm node's NodeAddr, what roles bind on and connect to (a node name
    need not resolve: Slurm reaches its nodes by NodeAddr), from `scontrol`; {}
    when it cannot answer (the names are used as they are)."""
    try:
        r = subprocess.run(["scontrol", "-o", "show", "node", ",".join(names)],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    out = {}
    for line in r.stdout.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if fields.get("NodeName") and fields.get("NodeAddr"):
            out[fields["NodeName"]] = fields["NodeAddr"]
    return out


def load_hosts(spec: str) -> list[Host]:
    """HOSTS as given on the command line: a file, `local` or `slurm` (a Ray
    cluster's, `ray` or `ray:ADDRESS`, come from ray_target.ray_hosts)."""
    if spec == "local":
        return [Host(address="127.0.0.1")]
    if spec == "slurm":
        return slurm_hosts()
    path = Path(spec)
    try:
        text = path.read_text()
    except OSError as e:
        raise HostsError(f"{spec}: cannot read hosts file: {e.strerror or e}") from None
    return parse_hosts(text, str(path))
