"""A sampler's or evaluator's way to the job's tool servers (`roles/toolserver.py`).

The agent loop calls tools from the role's worker thread, synchronously; each
call here becomes a `ToolCall` sent on the role's event loop over one DEALER
socket connected to every tool server of the job (round-robin among those
connected: `IMMEDIATE`, so nothing waits in the pipe of a server that is gone),
and the thread waits for its `ToolAnswer`. Every call has a deadline (twice the
call's sandbox limit and a margin for the queue): a server that died mid-call,
or none at all, answers the model with an error as text, and the rollout goes on.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import zmq

from .. import wire
from ..comm.messaging import reconnect, recv, send
from ..config.wiring import TOOL_CALLS
from ..seq.tools import Tool

if TYPE_CHECKING:
    from .base import Role

QUEUE_MARGIN_S = 15.0  # beyond twice a call's limit: waiting behind others at a server


class ToolClient:
    """Sends a role's tool calls to the job's tool servers and pairs the answers."""

    def __init__(self, role: Role, call_limit_s: float):
        self.role = role
        self.sock = role.ctx.transport.connect_edge(TOOL_CALLS)
        self.sock.setsockopt(zmq.IMMEDIATE, 1)
        self.servers: dict[str, str] = {}
        self.pending: dict[int, asyncio.Future[wire.ToolAnswer]] = {}
        self.ids = itertools.count(1)
        self.loop = asyncio.get_running_loop()
        self.deadline_s = 2 * call_limit_s + QUEUE_MARGIN_S
        self.sent = self.unanswered = 0

    def follow(self, members: dict[str, wire.Member]) -> None:
        """Connect to the tool servers that joined, leave those that left."""
        wanted = TOOL_CALLS.targets(members.values(), self.role.ctx.group)
        reconnect(self.sock, self.servers, wanted, self.role.log, "tool_server")

    async def run(self) -> None:
        """Pair each answer with the call waiting for it (a late one is dropped)."""
        while True:
            _, msg = await recv(self.sock, self.role.wire_stats, expect=(wire.ToolAnswer,))
            fut = self.pending.pop(msg.id, None) if msg is not None else None
            if fut is not None and not fut.done():
                fut.set_result(msg)

    async def _ask(self, call: wire.ToolCall) -> wire.ToolAnswer:
        call.id = next(self.ids)
        fut = self.pending[call.id] = self.loop.create_future()
        try:
            async with asyncio.timeout(self.deadline_s):
                await send(self.sock, call, self.role.id)  # waits while no server is up
                self.sent += 1
                got: wire.ToolAnswer = await fut
                return got
        except TimeoutError:
            self.unanswered += 1
            return wire.ToolAnswer(id=call.id, error=f"no tool server answered within "
                                                     f"{self.deadline_s:g} s")
        finally:
            self.pending.pop(call.id, None)

    def ask(self, tool: str, op: str, arguments: Any = None, state: Any = None
            ) -> wire.ToolAnswer:
        """One operation of a tool, from a worker thread (never the event loop's)."""
        args, st = json.dumps(arguments or {}), json.dumps(state)
        for what, text in (("arguments", args), ("state", st)):
            if len(text) > wire.MAX_STR:
                return wire.ToolAnswer(error=f"the call's {what} are over {wire.MAX_STR} "
                                             f"characters of JSON")
        call = wire.ToolCall(tool=tool, op=op, arguments=args, state=st)
        return asyncio.run_coroutine_threadsafe(self._ask(call), self.loop).result()

    def wrap(self, tool: Tool) -> Tool:
        """`tool` answered by the tool servers: its name and schema, read here."""
        return RemoteTool(tool.name, tool.describe(), self)

    def metrics(self) -> dict[str, float]:
        role = self.role.name
        return {f"{role}/tool_server_calls": float(self.sent),
                f"{role}/tool_server_unanswered": float(self.unanswered)}


def attach(role: Role) -> None:
    """A client to the job's tool servers, run beside the role (`Role.helpers`),
    every tool this process loads from now on answered there (`seq.tools.
    route_calls`). Before the role builds what calls tools (`service.serve`)."""
    from ..seq.prompts import prompt_settings
    from ..seq.tools import route_calls

    client = ToolClient(role, prompt_settings(role.job.environment.kwargs).tool_timeout_s)
    route_calls(client.wrap)
    role.helpers.append(client)


@dataclass
class RemoteTool:
    """A `Tool` (seq/tools.py) whose start and calls run at a tool server."""

    name: str
    schema: dict[str, Any]
    client: ToolClient

    def describe(self) -> dict[str, Any]:
        return self.schema

    def start(self) -> Any:
        got = self.client.ask(self.name, "start")
        try:
            return None if got.error else json.loads(got.state)
        except ValueError:
            return None

    def call(self, arguments: dict[str, Any], state: Any) -> str:
        got = self.client.ask(self.name, "call", arguments, state)
        if got.error:
            return f"error: {got.error}"
        after = json.loads(got.state)
        if isinstance(state, dict) and isinstance(after, dict):  # updated in place
            state.clear()
            state.update(after)
        return got.text
