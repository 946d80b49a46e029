"""The registry client every role runs: register, heartbeat, follow membership.

Liveness is zguide's Paranoid Pirate: any reply from the registry resets the
counter; after `heartbeat_liveness` silent intervals the client closes its
socket (linger 0), opens a new one and registers again, with capped
exponential backoff, keeping its last known membership meanwhile. Membership
is zguide's Clone: a snapshot at registration, then sequenced deltas on the
registry's PUB; a gap (seen from a delta or from the sequence number that
every heartbeat reply carries) asks for a new snapshot.

A registry that restarted knows only the members that registered again so far.
So after registering *again*, members missing from its snapshots are kept for
two liveness periods (every live member re-registers within them), then a fresh
snapshot decides: a registry restart costs no member a reconnect.
"""

from __future__ import annotations

import asyncio
import socket
import time

import zmq
import zmq.asyncio

from .. import wire
from ..comm.versions import local_versions
from ..config.wiring import MEMBERSHIP, TO_REGISTRY
from .base import Role, RoleRefused, recv, send


class RegistryClient:
    """Keeps one role registered and its view of the job's membership current."""

    def __init__(self, role: Role):
        self.role = role
        ctx = role.ctx
        self.t = ctx.transport
        self.endpoint = ctx.registry
        self.interval = role.job.launch.heartbeat_interval_s
        self.dead_after_s = role.job.launch.liveness_timeout_s
        self.log = role.log
        self.me = wire.Member(
            id=ctx.member_id, role=role.name, group=ctx.group, incarnation=ctx.incarnation,
            host=ctx.host or socket.gethostname(), index=ctx.index,
            endpoints=dict(role.endpoints), versions=local_versions(),
        )
        self.members: dict[str, wire.Member] = {}
        self.seq = -1
        self.version_seen = 0  # the group's highest params version, as the registry heard
        self.dealer: zmq.asyncio.Socket | None = None  # opened by `run`, before any exchange
        self.sub: zmq.asyncio.Socket | None = None
        self.sub_endpoint = ""
        self.registered = False
        self.last_reply = 0.0
        self.keep_until = 0.0  # until then, snapshots add members and drop none

    # -- membership -----------------------------------------------------------

    def _publish(self) -> None:
        self.role.on_membership(dict(self.members))

    def _apply_snapshot(self, seq: int, members: list[wire.Member]) -> None:
        new = {m.id: m for m in members}
        if time.monotonic() < self.keep_until:
            for mid, m in self.members.items():
                new.setdefault(mid, m)
        dropped = sorted(set(self.members) - set(new))
        if dropped:
            self.log.info("membership_changed", op="snapshot", dropped=dropped,
                          members=len(new))
        self.members = new
        self.seq = seq
        self._publish()

    def _apply_delta(self, d: wire.MembershipDelta) -> bool:
        """Apply a delta; False when a gap means a snapshot is needed."""
        if d.members_seq <= self.seq:
            return True
        if d.members_seq != self.seq + 1:
            return False
        self.seq = d.members_seq
        if d.op == "join":
            self.members[d.member.id] = d.member
        else:
            old = self.members.get(d.member.id)
            if old is not None and old.incarnation == d.member.incarnation:
                del self.members[d.member.id]
        self.log.info("membership_changed", op=d.op, member=d.member.id,
                      member_role=d.member.role, members=len(self.members))
        self._publish()
        return True

    # -- sockets ----------------------------------------------------------------

    def _open(self) -> None:
        self.dealer = self.t.connect_edge(TO_REGISTRY, self.endpoint)

    def _close(self) -> None:
        for s in (self.dealer, self.sub):
            if s is not None:
                self.t.close_socket(s)
        self.dealer = self.sub = None
        self.sub_endpoint = ""

    def _subscribe(self, endpoint: str) -> None:
        if endpoint == self.sub_endpoint or not endpoint:
            return
        if self.sub is not None:
            self.t.close_socket(self.sub)
        sub = self.t.connect_edge(MEMBERSHIP, endpoint)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.sub = sub
        self.sub_endpoint = endpoint

    # -- protocol ---------------------------------------------------------------

    @property
    def _d(self) -> zmq.asyncio.Socket:
        assert self.dealer is not None, "the registry's socket is opened before any exchange"
        return self.dealer

    async def _register(self) -> bool:
        self.me.endpoints = dict(self.role.endpoints)
        await send(self._d, wire.Register(member=self.me), self.me.id)
        deadline = time.monotonic() + self.dead_after_s
        while (left := deadline - time.monotonic()) > 0:
            if not await self._d.poll(left * 1000):
                break
            _, msg = await recv(self._d, self.role.wire_stats)
            if isinstance(msg, wire.RegisterReply):
                if not msg.ok:
                    raise RoleRefused(msg.error)
                self.registered = True
                self.version_seen = max(self.version_seen, msg.version_seen)
                self.last_reply = time.monotonic()
                if self.members:  # registering again: the registry may have restarted
                    # two liveness periods: a member that lost the registry retries
                    # with a backoff of up to one, and its retry may come just after ours
                    self.keep_until = self.last_reply + 2 * self.dead_after_s
                self._subscribe(msg.pub_endpoint)
                self._apply_snapshot(msg.members_seq, msg.members)
                self.log.info("registered", registry=self.endpoint, members=len(msg.members))
                return True
        return False

    async def _handle(self, msg: wire.Message) -> None:
        if isinstance(msg, wire.HeartbeatReply):
            self.version_seen = max(self.version_seen, msg.version_seen)
            if not msg.known:
                self.registered = False
            elif msg.members_seq > self.seq:
                await send(self._d, wire.SnapshotRequest(), self.me.id)
            if msg.shutdown:
                self.role.request_stop(f"job_shutdown:{msg.shutdown}")
        elif isinstance(msg, wire.MembershipSnapshot):
            if msg.members_seq >= self.seq:
                self._apply_snapshot(msg.members_seq, msg.members)
        elif isinstance(msg, wire.MembershipDelta):
            if not self._apply_delta(msg):
                await send(self._d, wire.SnapshotRequest(), self.me.id)
        elif isinstance(msg, wire.Shutdown):
            self.role.request_stop(f"job_shutdown:{msg.reason}")

    async def _session(self) -> None:
        """Heartbeat and follow membership until the registry goes silent or forgets us."""
        next_beat = 0.0
        while self.registered:
            now = time.monotonic()
            if self.keep_until and now >= self.keep_until:
                self.keep_until = 0.0  # the grace is over: the next snapshot decides
                await send(self._d, wire.SnapshotRequest(), self.me.id)
            if now >= next_beat:
                await send(self._d, wire.Heartbeat(incarnation=self.me.incarnation,
                                                       status=self.role.status()), self.me.id)
                next_beat = now + self.interval
            if now - self.last_reply > self.dead_after_s:
                self.log.warning("registry_lost", silent_s=round(now - self.last_reply, 2),
                                 members_kept=len(self.members))
                return
            poller = zmq.asyncio.Poller()
            poller.register(self._d, zmq.POLLIN)
            if self.sub is not None:
                poller.register(self.sub, zmq.POLLIN)
            events = dict(await poller.poll(max(1.0, (next_beat - time.monotonic()) * 1000)))
            if self._d in events:
                _, msg = await recv(self._d, self.role.wire_stats)
                self.last_reply = time.monotonic()
                if msg is not None:
                    await self._handle(msg)
            if self.sub is not None and self.sub in events:
                _, msg = await recv(self.sub, self.role.wire_stats)
                if msg is not None:
                    await self._handle(msg)
        self.log.info("registry_forgot_us", action="registering again")

    async def run(self) -> None:
        backoff = self.interval
        while True:
            self._open()
            if await self._register():
                backoff = self.interval
                await self._session()
            else:
                # a launched job is a CURVE job: a role started by hand without its
                # keys is refused without a word at the handshake
                hint = {} if self.t.keys is not None or self.t.inproc else {
                    "hint": "no CURVE keys: a launched job's roles take --keys "
                            "RUN_DIR/keys.json"}
                self.log.warning("registry_unreachable", registry=self.endpoint,
                                 retry_in_s=round(backoff, 2), **hint)
                self._close()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.dead_after_s)
                continue
            self._close()
            self.registered = False

    async def send_shutdown(self, reason: str) -> None:
        if self.dealer is not None:
            await send(self._d, wire.Shutdown(reason=reason), self.me.id)

    async def close(self) -> None:
        """Deregister (best effort: the registry may be gone) and close."""
        if self.dealer is not None and self.registered:
            try:
                async with asyncio.timeout(0.5):
                    await send(self._d, wire.Deregister(incarnation=self.me.incarnation),
                               self.me.id)
                await asyncio.sleep(0.05)  # let the frame leave before linger=0 close
            except (TimeoutError, zmq.ZMQError):
                pass
        self._close()
