"""The peers a gossip node knows and one DEALER to each: learned from the
registry's membership and from what neighbours say of theirs (so membership
survives the registry), dropped when the registry drops them or they do not
answer (not learned again from gossip for FORGET_DEAD_S). One the registry
still lists that did not answer is slow, not dead (a host starting up or held
to a CPU share): it is asked again after RETRY_QUIET_S, doubling each time it
stays silent, so that a slow start never leaves a peer with no one to gossip
with. Their sockets are closed only once an exchange in flight on one has
ended (closing a socket under a pending recv fails that recv, and with it the
role)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import zmq
import zmq.asyncio

from ... import wire
from ...comm.transport import Transport
from ...config.wiring import GOSSIP

FORGET_DEAD_S = 30.0  # a peer found dead is not re-learned from gossip for this long
RETRY_QUIET_S = 5.0  # a silent peer the registry lists is asked again after this (doubling)
MAX_LISTED = 64  # peers a hello names


def gossips(m: wire.Member) -> bool:
    """A member of a role that binds the gossip endpoint."""
    return m.role in GOSSIP.binders


class Neighbours:
    """Who is out there, and the socket to each; `on_drop(pid)` tells the node."""

    def __init__(self, my_id: str, transport: Transport, log: Any,
                 on_drop: Callable[[str], None]):
        self.id, self.transport, self.log, self.on_drop = my_id, transport, log, on_drop
        self.peers: dict[str, wire.Member] = {}
        self.dead: dict[str, float] = {}
        self.out: dict[str, tuple[str, zmq.asyncio.Socket]] = {}  # neighbour: endpoint, DEALER
        self.busy: set[str] = set()  # neighbours with an exchange in flight
        self.orphans: dict[str, list[zmq.asyncio.Socket]] = {}  # closed when it ends
        self.from_registry: dict[str, wire.Member] = {}
        self.quiet: dict[str, tuple[float, float]] = {}  # silent: (ask again at, wait)

    def on_membership(self, members: dict[str, wire.Member]) -> None:
        """The registry's view: peers it dropped are dropped here too."""
        now = {m.id: m for m in members.values() if gossips(m) and m.id != self.id}
        for pid in list(self.peers):
            if pid in self.from_registry and pid not in now:
                self.drop(pid, "registry")  # missed heartbeats, or left
        self.from_registry = now
        for m in now.values():
            self.learn(m, "registry")

    def learn(self, m: wire.Member, how: str) -> None:
        if m.id == self.id or not gossips(m) or not GOSSIP.endpoint_of(m):
            return
        if how == "gossip" and self.dead.get(m.id, 0.0) > time.monotonic():
            return
        old = self.peers.get(m.id)
        if old is None or GOSSIP.endpoint_of(old) != GOSSIP.endpoint_of(m):
            if old is not None:
                self.close(m.id)
            self.peers[m.id] = m
            self.dead.pop(m.id, None)
            if how != "retry":
                self.quiet.pop(m.id, None)
            self.log.info("peer_learned", member=m.id, via=how, peers=len(self.peers))

    def drop(self, pid: str, why: str) -> None:
        if self.peers.pop(pid, None) is None:
            return
        self.close(pid)
        self.dead[pid] = time.monotonic() + FORGET_DEAD_S
        self.on_drop(pid)
        self.log.info("neighbour_dropped", member=pid, reason=why, peers=len(self.peers))

    def close(self, pid: str) -> None:
        ep_sock = self.out.pop(pid, None)
        if ep_sock is None:
            return
        if pid in self.busy:  # an exchange waits on it: it closes it when done
            self.orphans.setdefault(pid, []).append(ep_sock[1])
        else:
            self.transport.close_socket(ep_sock[1])

    def dealer(self, pid: str) -> zmq.asyncio.Socket:
        ep = GOSSIP.endpoint_of(self.peers[pid])
        cur = self.out.get(pid)
        if cur is None or cur[0] != ep:
            if cur is not None:
                self.transport.close_socket(cur[1])
            cur = (ep, self.transport.connect_edge(GOSSIP, ep))
            self.out[pid] = cur
        return cur[1]

    def release(self, pid: str) -> None:
        """An exchange with `pid` has ended: its sockets dropped meanwhile close now."""
        self.busy.discard(pid)
        for orphan in self.orphans.pop(pid, []):
            self.transport.close_socket(orphan)

    def silent(self, pid: str, sock: zmq.asyncio.Socket) -> None:
        """`pid` did not answer on `sock`: dropped, unless dropped or replaced already."""
        cur = self.out.get(pid)
        if cur is not None and cur[1] is sock:
            self.drop(pid, "no_reply")
            wait = min(2 * self.quiet[pid][1], FORGET_DEAD_S) if pid in self.quiet \
                else RETRY_QUIET_S
            self.quiet[pid] = (time.monotonic() + wait, wait)

    def answered(self, pid: str) -> None:
        """`pid` answered: the next silence waits RETRY_QUIET_S again."""
        self.quiet.pop(pid, None)

    def retry_quiet(self) -> None:
        """Ask again the silent peers the registry still lists whose wait is over."""
        now = time.monotonic()
        for pid, (at, _) in list(self.quiet.items()):
            m = self.from_registry.get(pid)
            if m is None:
                del self.quiet[pid]  # gone from the registry too: dead
            elif at <= now and pid not in self.peers:
                self.learn(m, "retry")

    def listed(self) -> list[wire.Member]:
        """The peers a hello names."""
        return list(self.peers.values())[:MAX_LISTED]
