"""Tool server: runs the tool calls of a job's multi-turn rollouts, away from the
processes that act.

A ROUTER takes `ToolCall`s from every sampler and evaluator of the job
(`roles/tool_client.py`); each is answered by the job's tool of that name
(`environment.kwargs.tools`), a tool of the user's own in the sandbox
(`seq/tool_sandbox.py`: CPU time, memory, file size, processes, a private folder,
a wall-clock limit and an output cap; as root also no network and read-only
files), the built-in calculator by walking its syntax tree. Calls run in a
pool of threads, at most `WORKERS` at once; past that the server stops reading
and callers wait in the socket. Whatever a call does, its answer is a
`ToolAnswer`: its text, or the error the model reads. A server restarts like
any role; its callers reconnect, and a call it held when it died ends at the
caller's deadline, as an error. Imports no torch.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor

import zmq

from .. import wire
from ..config.roles import TOOLSERVER
from ..sandbox import confined
from ..seq.prompts import prompt_settings
from ..seq.tools import Tool, load_tools
from .base import Rates, Role, recv, send

LOGGED_ERRORS = 50  # failed calls logged each; past this, every 100th
WORKERS = max(8, 2 * (os.cpu_count() or 1))  # calls at once: most wait on a sandbox


class ToolServerRole(Role):
    """One tool server of the job."""

    name = TOOLSERVER

    async def setup(self) -> None:
        s = prompt_settings(self.job.environment.kwargs)
        self.tools: dict[str, Tool] = load_tools(s.tool_paths, limits=s.tool_limits)
        self.router, ep = self.ctx.transport.bind(zmq.ROUTER, "tools", hwm=1000)
        self.router.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.endpoints = {"tools": ep}
        self.pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="tool")
        self.slots = asyncio.Semaphore(WORKERS)
        self.calls = self.errors = self.undelivered = 0
        self.busy_s = 0.0
        self.rates = Rates(calls=0, busy_s=0.0)
        if not confined():  # what the user must know: the sandbox is only half of itself
            self.log.warning("tools_not_confined", reason="not root with unshare: tool calls "
                             "run under limits in a folder of their own, but with this "
                             "user's network and files")

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            while True:
                await self.slots.acquire()  # full: stop reading, callers wait in the socket
                prefix, msg = await recv(self.router, self.wire_stats, n_prefix=1,
                                         expect=(wire.ToolCall,))
                if msg is None:
                    self.slots.release()
                    continue
                tg.create_task(self._serve(prefix[0], msg))

    async def _serve(self, ident: zmq.Frame, call: wire.ToolCall) -> None:
        try:
            t0 = time.monotonic()
            out = await asyncio.get_running_loop().run_in_executor(self.pool, self.answer, call)
            self.busy_s += time.monotonic() - t0
            self.calls += 1
            why = out.error or (out.text if out.text.startswith("error:") else "")
            if why:
                self.errors += 1
                if self.errors <= LOGGED_ERRORS or self.errors % 100 == 0:  # the first, then a few
                    self.log.info("tool_call_failed", tool=call.tool, caller=call.src,
                                  arguments=call.arguments[:200],
                                  error=why[:300], errors=self.errors)
            try:
                await send(self.router, out, self.id, prefix=[ident])
            except zmq.ZMQError:  # the caller is gone (restarted): nobody to tell
                self.undelivered += 1
        finally:
            self.slots.release()

    def answer(self, call: wire.ToolCall) -> wire.ToolAnswer:
        """One call's answer (in a pool thread): never raises."""
        tool = self.tools.get(call.tool)
        if tool is None:
            return wire.ToolAnswer(id=call.id, error=f"no tool {call.tool!r} here; the tools "
                                   f"are {', '.join(sorted(self.tools))}")
        try:
            if call.op == "start":
                state = tool.start()
                text = ""
            elif call.op == "call":
                arguments, state = json.loads(call.arguments), json.loads(call.state)
                if not isinstance(arguments, dict):
                    raise ValueError("the arguments must be an object")
                text = str(tool.call(arguments, state))
            else:
                raise ValueError(f"unknown operation {call.op!r} (start, call)")
            after = json.dumps(state)
        except Exception as e:  # a tool's own failure is the model's to read
            return wire.ToolAnswer(id=call.id, error=f"{type(e).__name__}: {e}"[:wire.MAX_STR])
        if len(after) > wire.MAX_STR:
            return wire.ToolAnswer(id=call.id, error=f"the tool's state is over "
                                   f"{wire.MAX_STR} characters of JSON")
        # the agent loop keeps a few dozen tokens of an answer: its head is what counts
        return wire.ToolAnswer(id=call.id, text=text[:wire.MAX_STR], state=after)

    def metrics(self) -> dict[str, float]:
        deltas, dt = self.rates.update(calls=self.calls, busy_s=self.busy_s)
        return {"toolserver/calls": float(self.calls), "toolserver/errors": float(self.errors),
                "toolserver/undelivered": float(self.undelivered),
                "toolserver/calls_per_s": deltas["calls"] / dt,
                "toolserver/call_s": deltas["busy_s"] / max(deltas["calls"], 1)}

    async def teardown(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


ROLE = ToolServerRole
