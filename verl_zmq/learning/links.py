"""One DEALER per replay shard of a learner's group.

A shard is its member id, endpoint *and* incarnation: a restarted shard may
bind the same port, but it knows nothing of the credits we gave its previous
self, so it gets a fresh socket. Each link has one reader task (a socket is
used by one task only); a link's reader is cancelled before its socket closes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import zmq

from .. import wire
from ..comm.messaging import recv, send
from ..config.wiring import REQUESTS
from .state import LinkConfig


@dataclass(frozen=True)
class ShardAddress:
    """Where a shard is, and which start of it."""

    endpoint: str
    incarnation: int = 0


@dataclass(eq=False)
class Link:
    """The connection to one shard: its socket, what we asked of it, what it said."""

    member: str
    address: ShardAddress
    sock: zmq.asyncio.Socket
    credit: int = 0  # requests outstanding (fragments or sampled batches)
    size: int = 1  # its last reported size (off-policy), for proportional requests
    env_steps: int = 0  # its last reported env steps (off-policy)
    reader: asyncio.Task[None] | None = field(default=None, repr=False)
    open: bool = True


OnMessage = Callable[[Link, "wire.Batch | None"], Awaitable[None]]


class ShardLinks:
    """The set of shard links, reconciled with the group's membership."""

    def __init__(self, cfg: LinkConfig, on_message: OnMessage):
        self.transport = cfg.transport
        self.log = cfg.log
        self.stats = cfg.stats
        self.src = cfg.src
        self.on_message = on_message
        self.spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]] = \
            asyncio.create_task
        self.links: dict[str, Link] = {}

    def attach(self, tasks: asyncio.TaskGroup) -> None:
        """Run the links' readers in the role's task group: a reader's crash stops
        the role instead of vanishing with its task."""
        self.spawn = tasks.create_task

    def __len__(self) -> int:
        return len(self.links)

    def live(self) -> list[Link]:
        """Links open now, in connection order."""
        return list(self.links.values())

    def is_live(self, link: Link) -> bool:
        return link.open and self.links.get(link.member) is link

    async def send(self, link: Link, msg: wire.Message) -> bool:
        """Send on a link if it is still open; False when it was closed meanwhile."""
        if not self.is_live(link):
            return False
        await send(link.sock, msg, self.src)
        return True

    def reconcile(self, wanted: dict[str, ShardAddress]) -> list[Link]:
        """Close links to shards gone or restarted, open links to new ones; returns
        the new links (the caller grants their first credits)."""
        for mid, link in list(self.links.items()):
            if wanted.get(mid) != link.address:
                self.close(mid)
        new = []
        for mid, addr in wanted.items():
            if addr.endpoint and mid not in self.links:
                sock = self.transport.connect_edge(REQUESTS, addr.endpoint)
                link = Link(mid, addr, sock)
                link.reader = self.spawn(self._read(link))
                self.links[mid] = link
                new.append(link)
                self.log.info("shard_connected", member=mid, endpoint=addr.endpoint,
                              shard_incarnation=addr.incarnation)
        return new

    def close(self, mid: str) -> None:
        link = self.links.pop(mid)
        link.open = False
        if link.reader is not None:  # stop its reader before closing its socket
            link.reader.cancel()
        self.transport.close_socket(link.sock)
        self.log.info("shard_disconnected", member=mid, endpoint=link.address.endpoint,
                      shard_incarnation=link.address.incarnation)

    def close_all(self) -> None:
        for mid in list(self.links):
            self.close(mid)

    def reset(self) -> dict[str, ShardAddress]:
        """After a stalled wait: close every link (a fresh socket each on the next
        `reconcile`: the shard sees a new peer, and credits lost on the way, with a
        connection cut while either side was paused, are granted anew); the
        addresses they had (none: nothing to ask, and the stall says so already)."""
        wanted = {mid: link.address for mid, link in self.links.items()}
        if wanted:
            self.log.info("shard_links_reset", shards=sorted(wanted),
                          why="no batch within the requests' deadline: credits may have "
                              "been lost with a cut connection")
        self.close_all()
        return wanted

    async def _read(self, link: Link) -> None:
        while True:
            _, msg = await recv(link.sock, self.stats, expect=(wire.Batch,))
            await self.on_message(link, msg)
