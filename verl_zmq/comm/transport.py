"""The one place that makes sockets: zmq.asyncio, high-water marks, linger,
ephemeral ports inside the job's port range, and CURVE with a ZAP
authenticator that admits only the job's key.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq
import zmq.asyncio

from ..config.wiring import Edge

DEFAULT_HWM = 16
_inproc_ids = itertools.count()


@dataclass(frozen=True)
class CurveKeys:
    """The job's CURVE key pair (z85). Every socket of the job uses it; the ZAP
    authenticator admits only clients that hold it."""

    public: str
    secret: str

    @classmethod
    def generate(cls) -> CurveKeys:
        pub, sec = zmq.curve_keypair()
        return cls(public=pub.decode(), secret=sec.decode())

    def to_json(self) -> str:
        return json.dumps({"public": self.public, "secret": self.secret})

    @classmethod
    def from_json(cls, text: str) -> CurveKeys:
        d = json.loads(text)
        if not isinstance(d, dict) or not {"public", "secret"} <= set(d):
            raise ValueError("expected a JSON object with 'public' and 'secret'")
        for k in ("public", "secret"):
            if not isinstance(d[k], str) or len(d[k]) != 40:
                raise ValueError(f"'{k}' is not a 40-character z85 key")
        return cls(public=d["public"], secret=d["secret"])

    def save(self, path: str | Path) -> None:
        """Write the keys readable by their owner only."""
        path = Path(path)
        tmp = path.with_name(f".{path.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)  # an old file keeps its mode through O_CREAT
        with os.fdopen(fd, "w") as f:
            f.write(self.to_json())
        os.replace(tmp, path)  # whole or absent: a reader never sees half a key

    @classmethod
    def load(cls, path: str | Path) -> CurveKeys:
        path = Path(path)
        mode = path.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise PermissionError(
                f"{path}: keys file is readable by others (mode {oct(mode & 0o777)}); "
                f"chmod 600 {path}"
            )
        return cls.from_json(path.read_text())


def curve_enabled(setting: bool | str) -> bool:
    """Whether a launched job's sockets use CURVE: `security.curve` "auto" (the
    default) and true are on for every job, local ones too (any local process could
    otherwise send a local job frames); false is off."""
    return setting is not False


def candidate_ports(lo: int, hi: int, reserved: frozenset[int] = frozenset(),
                    limit: int | None = None) -> list[int]:
    """The ports of [lo, hi] less `reserved`, in random order (at most `limit`): how
    every ephemeral bind of a job (a socket, the learner group's store) picks its own."""
    ports = [p for p in range(lo, hi + 1) if p not in reserved]
    return random.sample(ports, len(ports) if limit is None else min(len(ports), limit))


# socket kinds that receive messages (not only commands): a connection of theirs
# whose reader stalls has its input stopped with a full pipe
_RECEIVING = frozenset({zmq.SUB, zmq.XSUB, zmq.PULL, zmq.DEALER, zmq.REQ, zmq.REP,
                        zmq.ROUTER, zmq.PAIR})


def liveness_options(kind: int, server: bool, heartbeat_ms: int,
                     dead_after_ms: int) -> dict[zmq.SocketOption, int]:
    """Socket options that drop a connection silent for `dead_after_ms`, so traffic
    resumes at once after a partition heals and a peer gone without a FIN stops
    holding a pipe (nothing when `heartbeat_ms` is 0).

    ZMTP heartbeats everywhere but on a connecting socket that receives (SUB,
    PULL, DEALER), and no TTL in a bound socket's pings: libzmq 4.3.5 aborts
    (`Assertion failed: _input_stopped`, stream_engine_base.cpp) when a heartbeat
    timer closes a connecting socket's connection while its reader stalls with a
    full pipe, the session dials again, and the reader then drains: the new
    connection is told to restart an input it never stopped
    (tools/faults/zmq_abort.py reproduces it). Such sockets notice a dead peer from
    the kernel instead: keepalive probes while the connection is idle, and
    TCP_USER_TIMEOUT (ZMQ_TCP_MAXRT) for data left unacknowledged; a closed
    connection is seen when the engine next reads, never while its input is
    stopped."""
    if not heartbeat_ms:
        return {}
    if server:
        return {zmq.HEARTBEAT_IVL: heartbeat_ms, zmq.HEARTBEAT_TIMEOUT: dead_after_ms}
    # a dial into a partition is given up after as long and tried afresh, so the
    # first try after the heal is not a SYN in its exponential backoff
    opts = {zmq.CONNECT_TIMEOUT: dead_after_ms}
    if kind not in _RECEIVING:
        return opts | {zmq.HEARTBEAT_IVL: heartbeat_ms, zmq.HEARTBEAT_TIMEOUT: dead_after_ms,
                       zmq.HEARTBEAT_TTL: dead_after_ms}
    probe_s = max(1, round(heartbeat_ms / 1000))  # keepalive counts whole seconds
    return opts | {zmq.TCP_KEEPALIVE: 1, zmq.TCP_KEEPALIVE_IDLE: probe_s,
                   zmq.TCP_KEEPALIVE_INTVL: probe_s,
                   zmq.TCP_KEEPALIVE_CNT: max(1, math.ceil(dead_after_ms / 1000 / probe_s) - 1),
                   zmq.TCP_MAXRT: dead_after_ms}


class Transport:
    """Makes, binds and connects the sockets of one role process.

    `host` is the address to bind on (the host's address from the plan);
    `inproc=True` (the one-process `verl run` mode) binds `inproc://` names instead.
    """

    def __init__(self, ctx: zmq.asyncio.Context, host: str = "127.0.0.1",
                 port_range: tuple[int, int] = (29500, 29999), keys: CurveKeys | None = None,
                 inproc: bool = False, on_denied: Callable[[str], None] | None = None,
                 reserved: frozenset[int] = frozenset(), heartbeat_s: float = 0.0,
                 dead_after_s: float = 0.0):
        self.ctx = ctx
        self.host = host
        self.port_range = port_range
        # ports of the range that ephemeral binds leave alone: the registry's, which
        # a member starting first (or while the registry restarts) would otherwise take
        self.reserved = reserved
        # ZMTP heartbeats on every TCP connection (0: off): a connection silent for
        # `dead_after_s` is closed and dialled again, so that after a partition heals
        # traffic resumes at once instead of after TCP's retransmission backoff, and
        # a peer that vanished without a FIN stops holding a pipe
        self.heartbeat_ms = int(heartbeat_s * 1000)
        self.dead_after_ms = int(dead_after_s * 1000)
        self.keys = None if inproc else keys
        self.inproc = inproc
        self.on_denied = on_denied
        self.auth: Any = None  # zmq's AsyncioAuthenticator once started (untyped)
        self.sockets: list[zmq.asyncio.Socket] = []

    def start_auth(self) -> None:
        """Start the ZAP authenticator (needs a running event loop) when CURVE is on."""
        if self.keys is None or self.auth is not None:
            return
        from zmq.auth.asyncio import AsyncioAuthenticator

        self.auth = AsyncioAuthenticator(self.ctx)
        self.auth.start()
        self.auth.configure_curve_callback(domain="*", credentials_provider=self)

    def callback(self, domain: str, client_key: bytes) -> bool:
        """ZAP credentials provider: admit only the job's own public key."""
        ok = self.keys is not None and client_key.decode("ascii", "replace") == self.keys.public
        if not ok and self.on_denied is not None:
            self.on_denied(client_key.decode("ascii", "replace"))
        return ok

    def socket(self, kind: int, hwm: int = DEFAULT_HWM, server: bool = False,
               kernel_buffer: int = 0) -> zmq.asyncio.Socket:
        """`kernel_buffer` (bytes, 0: the OS's autotuned default) bounds what the
        kernel holds per TCP connection: the high-water mark counts messages, and
        an autotuned buffer of megabytes holds thousands of small ones, a queue of
        stale experience that backpressure never sees."""
        s = self.ctx.socket(kind)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.SNDHWM, hwm)
        s.setsockopt(zmq.RCVHWM, hwm)
        if not self.inproc:
            for opt, value in liveness_options(kind, server, self.heartbeat_ms,
                                               self.dead_after_ms).items():
                s.setsockopt(opt, value)
        if kernel_buffer:
            s.setsockopt(zmq.SNDBUF, kernel_buffer)
            s.setsockopt(zmq.RCVBUF, kernel_buffer)
        if self.keys is not None:
            if server:
                s.curve_server = True
                s.curve_secretkey = self.keys.secret.encode()
                s.curve_publickey = self.keys.public.encode()
            else:
                s.curve_serverkey = self.keys.public.encode()
                s.curve_publickey = self.keys.public.encode()
                s.curve_secretkey = self.keys.secret.encode()
        self.sockets.append(s)
        return s

    def bind(self, kind: int, name: str, port: int | None = None,
             hwm: int = DEFAULT_HWM, kernel_buffer: int = 0) -> tuple[zmq.asyncio.Socket, str]:
        """A bound socket and its endpoint: a fixed port, or an ephemeral one in range."""
        s = self.socket(kind, hwm=hwm, server=True, kernel_buffer=kernel_buffer)
        if self.inproc:
            ep = f"inproc://{name}-{next(_inproc_ids)}"
            s.bind(ep)
            return s, ep
        host = "*" if self.host in ("*", "0.0.0.0") else self.host
        if port:
            s.bind(f"tcp://{host}:{port}")
        else:
            port = self._bind_random(s, host)
        return s, f"tcp://{self.host}:{port}"

    def _bind_random(self, s: zmq.asyncio.Socket, host: str) -> int:
        lo, hi = self.port_range
        for port in candidate_ports(lo, hi, self.reserved, 200):
            try:
                s.bind(f"tcp://{host}:{port}")
                return port
            except zmq.ZMQError as e:
                if e.errno != zmq.EADDRINUSE:
                    raise
        raise zmq.ZMQError(zmq.EADDRINUSE, f"no free port in launch.port_range [{lo}, {hi}]")

    def connect(self, kind: int, endpoint: str | None = None,
                hwm: int = DEFAULT_HWM, kernel_buffer: int = 0) -> zmq.asyncio.Socket:
        """A socket of `kind` (connected to `endpoint` where given). Roles connect
        through `connect_edge`, the job's declared data flow."""
        s = self.socket(kind, hwm=hwm, kernel_buffer=kernel_buffer)
        if endpoint:
            s.connect(endpoint)
        return s

    def connect_edge(self, edge: Edge, endpoint: str | None = None,
                     kernel_buffer: int = 0, hwm: int | None = None) -> zmq.asyncio.Socket:
        """The connecting side of one edge of the data flow (`config/wiring.py`): its
        socket pattern and high-water mark (`hwm`, where given: 0 keeps everything),
        connected to `endpoint` where given."""
        return self.connect(getattr(zmq, edge.pattern), endpoint,
                            hwm=edge.hwm if hwm is None else hwm, kernel_buffer=kernel_buffer)

    def close_socket(self, s: zmq.asyncio.Socket) -> None:
        if s in self.sockets:
            self.sockets.remove(s)
        s.close(linger=0)

    def close(self) -> None:
        for s in self.sockets:
            s.close(linger=0)
        self.sockets.clear()
        if self.auth is not None:
            self.auth.stop()
            self.auth = None

