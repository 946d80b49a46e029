"""Messages on sockets: send and receive one wire message, count the bad ones,
and follow endpoints as members come and go. Used by roles and the learner's
feeds alike."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from typing import Any, TypeVar

import zmq
import zmq.asyncio

from .. import wire

RECV_POLL_MS = 250
_seq = itertools.count(1)


class WireStats:
    """Counts malformed messages; logs at most one line per sender per interval."""

    def __init__(self, log: Any, interval_s: float):
        self.log = log
        self.interval_s = interval_s
        self.errors = 0
        self._last: dict[str, float] = {}

    def reject(self, sender: str, err: Exception) -> None:
        self.errors += 1
        now = time.monotonic()
        if now - self._last.get(sender, -1e9) >= self.interval_s:
            self._last[sender] = now
            if len(self._last) > 10_000:  # bounded: forget the oldest senders
                self._last.clear()
            self.log.warning("message_rejected", sender=sender[:64], error=str(err)[:300],
                             wire_errors=self.errors)


async def send(sock: zmq.asyncio.Socket, msg: wire.Message, src: str,
               prefix: list[Any] | None = None) -> None:
    msg.src = src
    msg.seq = next(_seq)
    await sock.send_multipart((prefix or []) + wire.encode(msg), copy=False)


async def recv_frames(sock: zmq.asyncio.Socket) -> list[zmq.Frame]:
    """The next multipart message's frames, waiting as long as it takes. Polls with a
    timeout rather than block in recv: each poll re-reads the socket's events, so a
    wake-up lost on the edge-triggered fd (seen with inproc pipes that attach while
    a reader waits) costs at most one interval, never forever. A socket that said
    it was readable may still have nothing to read (libzmq processed a peer's
    disconnect or a handshake instead: recv raises Again); that is a wait too,
    not a failure (it stopped a replay shard, restart after restart, under load)."""
    while True:
        while not await sock.poll(RECV_POLL_MS):
            pass
        try:
            frames: list[zmq.Frame] = await sock.recv_multipart(copy=False)
            return frames
        except zmq.Again:
            continue


async def recv(sock: zmq.asyncio.Socket, stats: WireStats, n_prefix: int = 0,
               expect: tuple[type, ...] | None = None
               ) -> tuple[list[zmq.Frame], Any]:
    """Receive one message: (prefix frames, message) or (prefix, None) if it was bad
    (a message of `expect` where given: callers read its fields, hence Any)."""
    return decode(await recv_frames(sock), stats, n_prefix, expect)


def decode(frames: list[zmq.Frame], stats: WireStats, n_prefix: int = 0,
           expect: tuple[type, ...] | None = None) -> tuple[list[zmq.Frame], Any]:
    """`recv`'s reading of frames already received (a caller that keeps them)."""
    prefix = frames[:n_prefix]
    sender = prefix[0].bytes.hex() if prefix else "peer"
    if len(frames) <= n_prefix:
        stats.reject(sender, wire.WireError("no frames after the envelope"))
        return prefix, None
    try:
        msg = wire.decode(frames[n_prefix:])
    except wire.WireError as e:
        stats.reject(sender, e)
        return prefix, None
    if expect is not None and not isinstance(msg, expect):
        stats.reject(msg.src or sender, wire.WireError(f"unexpected kind {msg.KIND.name}"))
        return prefix, None
    return prefix, msg


M = TypeVar("M", bound=wire.Message)


async def request(sock: zmq.asyncio.Socket, msg: wire.Message, src: str, stats: WireStats,
                  kind: type[M], timeout_s: float) -> M | None:
    """Send one request and wait for a reply of `kind` (others are counted and
    skipped); None when none comes within `timeout_s`."""
    await send(sock, msg, src)
    try:
        async with asyncio.timeout(timeout_s):
            while True:
                _, reply = await recv(sock, stats, expect=(kind,))
                if isinstance(reply, kind):
                    return reply
    except TimeoutError:
        return None


def reconnect(sock: zmq.Socket[Any], current: dict[str, str], wanted: dict[str, str], log: Any,
              what: str) -> None:
    """Connect to endpoints that appeared, disconnect from those that left."""
    for mid, ep in list(current.items()):
        if wanted.get(mid) != ep:
            with contextlib.suppress(zmq.ZMQError):
                sock.disconnect(ep)
            del current[mid]
            log.info(f"{what}_disconnected", member=mid, endpoint=ep)
    for mid, ep in wanted.items():
        if ep and mid not in current:
            sock.connect(ep)
            current[mid] = ep
            log.info(f"{what}_connected", member=mid, endpoint=ep)
