"""A sampler's or evaluator's way to the job's tool servers (`roles/toolserver.py`):
every tool it loads answers through a `Requester` (`ToolCall` out, `ToolAnswer`
back). A call's deadline is twice its sandbox limit and a margin for the queue
at a server; a call past it, or lost with a server that died, is answered with
an error the model reads, and the rollout goes on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import wire
from ..config.wiring import TOOL_CALLS
from ..seq.tool_sandbox import carry_state
from .requester import Requester

if TYPE_CHECKING:
    from .base import Role

QUEUE_MARGIN_S = 15.0  # beyond twice a call's limit: waiting behind others at a server


def attach(role: Role) -> None:
    """A client to the job's tool servers, run beside the role (`Role.helpers`),
    every tool this process loads from now on answered there (`seq.tools.
    route_calls`). Before the role builds what calls tools (`service.serve`)."""
    from ..seq.prompts import prompt_settings
    from ..seq.tools import route_calls

    limit = prompt_settings(role.job.environment.kwargs).tool_timeout_s
    requests = Requester(role, TOOL_CALLS, role.ctx.transport.connect_edge(TOOL_CALLS),
                         wire.ToolAnswer, 2 * limit + QUEUE_MARGIN_S, "tool_server")
    route_calls(lambda tool: RemoteTool(tool.name, tool.describe(), requests))
    role.helpers.append(requests)


def ask(requests: Requester, tool: str, op: str, arguments: Any = None, state: Any = None
        ) -> wire.ToolAnswer:
    """One operation of a tool at a tool server; its answer, an error where none came."""
    args, st = json.dumps(arguments or {}), json.dumps(state)
    for what, text in (("arguments", args), ("state", st)):
        if len(text) > wire.MAX_STR:
            return wire.ToolAnswer(error=f"the call's {what} are over {wire.MAX_STR} "
                                         f"characters of JSON")
    got = requests.ask(wire.ToolCall(tool=tool, op=op, arguments=args, state=st))
    return got if got is not None else wire.ToolAnswer(
        error=f"no tool server answered within {requests.deadline_s:g} s")


@dataclass
class RemoteTool:
    """A `Tool` (seq/tools.py) whose start and calls run at a tool server."""

    name: str
    schema: dict[str, Any]
    requests: Requester

    def describe(self) -> dict[str, Any]:
        return self.schema

    def start(self) -> Any:
        got = ask(self.requests, self.name, "start")
        try:
            return None if got.error else json.loads(got.state)
        except ValueError:
            return None

    def call(self, arguments: dict[str, Any], state: Any) -> str:
        got = ask(self.requests, self.name, "call", arguments, state)
        if got.error:
            return f"error: {got.error}"
        carry_state(state, json.loads(got.state))
        return got.text

