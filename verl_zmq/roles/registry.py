"""The registry: the job's live membership (zguide Clone + Paranoid Pirate).

ROUTER on the job's fixed port takes registrations, heartbeats, snapshot
requests, deregistrations and job-wide shutdowns; PUB publishes sequenced
membership deltas and shutdowns. A member silent for `heartbeat_liveness`
intervals is dropped. Heartbeats carry each member's params version; the highest
of a group goes back in every reply (`version_seen`), so a trainer that takes
over never publishes a version below one its group has used. Imports no torch:
it starts in a fraction of a second.
"""

from __future__ import annotations

import asyncio
import time

import zmq

from .. import wire
from ..comm.versions import local_versions, mismatch
from ..config.roles import REGISTRY
from .base import Role, RoleContext, recv, send


class RegistryRole(Role):
    """Keeps who is in the job, where, and whether they are alive."""

    name = REGISTRY
    uses_registry = False

    def __init__(self, ctx: RoleContext):
        super().__init__(ctx)
        self.members: dict[str, wire.Member] = {}
        self.identity: dict[str, bytes] = {}
        self.last_seen: dict[str, float] = {}
        self.seq = 0
        self.versions = local_versions()
        self.shutdown_reason = ""
        self.refused = 0
        self.dropped = 0
        # group -> the highest params version its members' heartbeats reported: the
        # floor a trainer that takes over numbers its next params above
        self.seen: dict[str, int] = {}

    async def setup(self) -> None:
        t = self.ctx.transport
        if t.inproc:
            self.router = t.socket(zmq.ROUTER, hwm=10_000, server=True)
            self.router.bind(self.ctx.registry)
            ep = self.ctx.registry
        else:
            port = int(self.ctx.registry.rsplit(":", 1)[-1])
            self.router, ep = t.bind(zmq.ROUTER, "registry", port=port, hwm=10_000)
        self.pub, pub_ep = t.bind(zmq.PUB, "registry-pub", hwm=10_000)
        self.endpoints = {"registry": ep, "membership": pub_ep}

    def status(self) -> dict[str, float]:
        return {"members": len(self.members)}

    def metrics(self) -> dict[str, float]:
        return {"registry/members": len(self.members), "registry/seq": self.seq,
                "registry/refused": self.refused, "registry/dropped": self.dropped}

    async def _publish(self, op: str, m: wire.Member) -> None:
        self.seq += 1
        await send(self.pub, wire.MembershipDelta(members_seq=self.seq, op=op, member=m), self.id)

    async def _reply(self, ident: bytes, msg: wire.Message) -> None:
        await send(self.router, msg, self.id, prefix=[ident])

    async def _on_register(self, ident: bytes, msg: wire.Register) -> None:
        m = msg.member
        why = mismatch(self.versions, m.versions)
        if not m.id:
            why = "a member needs an id"
        if why:
            self.refused += 1
            self.log.error("member_refused", member=m.id, member_host=m.host, error=why)
            await self._reply(ident, wire.RegisterReply(ok=False, error=f"refused by the "
                                                        f"registry: {why}"))
            return
        old = self.members.get(m.id)
        self.members[m.id] = m
        self.identity[m.id] = ident
        self.last_seen[m.id] = time.monotonic()
        if old is None or old.incarnation != m.incarnation or old.endpoints != m.endpoints:
            self.log.info("member_joined", member=m.id, member_role=m.role, member_group=m.group,
                          member_host=m.host, incarnation=m.incarnation,
                          restarted=old is not None)
            await self._publish("join", m)
        await self._reply(ident, wire.RegisterReply(
            ok=True, pub_endpoint=self.endpoints["membership"], members_seq=self.seq,
            members=list(self.members.values()), version_seen=self.seen.get(m.group, 0)))

    async def _drop(self, member_id: str, why: str) -> None:
        m = self.members.pop(member_id, None)
        self.last_seen.pop(member_id, None)
        self.identity.pop(member_id, None)
        if m is not None:
            self.log.info("member_left", member=member_id, member_role=m.role, reason=why)
            await self._publish("leave", m)
        if self.shutdown_reason and not self.members:  # everyone has heard: no need to wait
            self.request_stop(f"job_shutdown:{self.shutdown_reason}")

    async def _handle(self, ident: bytes, msg: wire.Message) -> None:
        m = self.members.get(msg.src)
        if isinstance(msg, wire.Register):
            await self._on_register(ident, msg)
        elif isinstance(msg, wire.Heartbeat):
            known = m is not None and m.incarnation == msg.incarnation
            group = m.group if m is not None else ""
            if known:
                self.last_seen[msg.src] = time.monotonic()
                self.identity[msg.src] = ident
                version = msg.status.get("version", 0)
                if isinstance(version, int | float) and version > self.seen.get(group, 0):
                    self.seen[group] = int(version)
            await self._reply(ident, wire.HeartbeatReply(
                known=known, members_seq=self.seq, shutdown=self.shutdown_reason,
                version_seen=self.seen.get(group, 0)))
        elif isinstance(msg, wire.SnapshotRequest):
            await self._reply(ident, wire.MembershipSnapshot(
                members_seq=self.seq, members=list(self.members.values())))
        elif isinstance(msg, wire.Deregister):
            if m is not None and m.incarnation == msg.incarnation:
                await self._drop(msg.src, "deregistered")
        elif isinstance(msg, wire.Shutdown):
            if not self.shutdown_reason:
                self.shutdown_reason = msg.reason or "requested"
                self.log.info("job_shutdown", reason=self.shutdown_reason, by=msg.src)
                await send(self.pub, wire.Shutdown(reason=self.shutdown_reason), self.id)
                asyncio.get_running_loop().call_later(
                    self.job.launch.heartbeat_interval_s * 2, self.request_stop,
                    f"job_shutdown:{self.shutdown_reason}")
        else:
            self.wire_stats.reject(msg.src, wire.WireError(f"unexpected {msg.KIND.name}"))

    async def _reaper(self) -> None:
        interval = self.job.launch.heartbeat_interval_s
        limit = self.job.launch.liveness_timeout_s
        while True:
            await asyncio.sleep(interval / 2)
            now = time.monotonic()
            for mid, seen in list(self.last_seen.items()):
                if now - seen > limit:
                    self.dropped += 1
                    await self._drop(mid, f"no heartbeat for {now - seen:.1f}s")

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._reaper())
            while True:
                prefix, msg = await recv(self.router, self.wire_stats, n_prefix=1)
                if msg is not None:
                    await self._handle(prefix[0].bytes, msg)


ROLE = RegistryRole
