"""Requests from a role's worker thread to the servers of the job that bind one
endpoint (tool servers, reward-model servers), over ZeroMQ.

The thread that rolls out (the agent loop, the scorer) asks synchronously; each
request is sent on the role's event loop over one DEALER socket connected to
every such server of the job (round-robin among those connected: `IMMEDIATE`,
so nothing waits in the pipe of a server that is gone), and the thread waits
for the reply that carries its `id`. Every request has a deadline: a server
that died holding it, or none at all, gives `None`, which the caller turns into
an error the rollout goes on with. A late reply is dropped.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import TYPE_CHECKING, Any

import zmq
import zmq.asyncio

from .. import wire
from ..comm.messaging import reconnect, recv, send
from ..config.wiring import Edge

if TYPE_CHECKING:
    from .base import Role


class Requester:
    """One role's requests on `edge`, each paired with its reply of `reply` kind; a
    `Role.helpers` entry (it runs, follows the membership, reports `<role>/<what>_*`)."""

    def __init__(self, role: Role, edge: Edge, sock: zmq.asyncio.Socket, reply: type[Any],
                 deadline_s: float, what: str):
        self.role, self.edge, self.reply, self.what = role, edge, reply, what
        self.sock = sock  # `edge`'s, connected by the caller (the data flow names it there)
        self.sock.setsockopt(zmq.IMMEDIATE, 1)
        self.servers: dict[str, str] = {}
        self.pending: dict[int, asyncio.Future[Any]] = {}
        self.ids = itertools.count(1)
        self.loop = asyncio.get_running_loop()
        self.deadline_s = deadline_s
        self.sent = self.unanswered = 0

    def follow(self, members: dict[str, wire.Member]) -> None:
        """Connect to the servers that joined, leave those that left."""
        wanted = self.edge.targets(members.values(), self.role.ctx.group)
        reconnect(self.sock, self.servers, wanted, self.role.log, self.what)

    async def run(self) -> None:
        """Pair each reply with the request waiting for it."""
        while True:
            _, msg = await recv(self.sock, self.role.wire_stats, expect=(self.reply,))
            fut = self.pending.pop(msg.id, None) if msg is not None else None
            if fut is not None and not fut.done():
                fut.set_result(msg)

    async def _ask(self, msg: Any) -> Any:
        msg.id = next(self.ids)
        fut = self.pending[msg.id] = self.loop.create_future()
        try:
            async with asyncio.timeout(self.deadline_s):
                await send(self.sock, msg, self.role.id)  # waits while no server is up
                self.sent += 1
                return await fut
        except TimeoutError:
            self.unanswered += 1
            return None
        finally:
            self.pending.pop(msg.id, None)

    def ask(self, msg: Any) -> Any:
        """`msg`'s reply, or None past the deadline; from a worker thread only (never
        the event loop's)."""
        return asyncio.run_coroutine_threadsafe(self._ask(msg), self.loop).result()

    def metrics(self) -> dict[str, float]:
        role = self.role.name
        return {f"{role}/{self.what}_requests": float(self.sent),
                f"{role}/{self.what}_unanswered": float(self.unanswered)}
