"""A tool of the user's own, run in the sandbox: every call (and the import of its
module, and its `describe()`) happens in a fresh confined process
(`verl_zmq.sandbox`: limits on CPU time, memory, file size and processes, a
wall-clock timeout, a cap on output, and as root no network and every file
read-only but its own folder). Nothing of a user's tool runs in the sampler.

The call's state for its trajectory travels in and out as JSON: a sandboxed
tool's `start()` and `call(arguments, state)` keep it JSON-serialisable (a dict
it updates in place is returned as it stands after the call). A call that
fails, is stopped by a limit, or answers no JSON is answered with the error, as
text the model reads.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from typing import Any

from ..sandbox import Limits, run

__all__ = ["SandboxedTool", "sandboxed"]

# run by the job's interpreter inside the sandbox: import the tool, do one thing,
# print one JSON line (the request comes on stdin)
RUNNER = """
import importlib, json, sys
sys.path[:0] = json.loads(sys.argv[2])
mod, _, name = sys.argv[1].partition(":")
tool = getattr(importlib.import_module(mod), name)()
req = json.loads(sys.stdin.read())
if req["op"] == "describe":
    out = {"name": tool.name, "describe": tool.describe()}
elif req["op"] == "start":
    out = {"state": tool.start()}
else:
    state = req["state"]
    text = tool.call(req["arguments"], state)
    out = {"text": str(text), "state": state}
print(json.dumps(out))
"""


def carry_state(state: Any, after: Any) -> None:
    """A call's state as it came back (JSON, from a sandbox or a tool server) into
    the trajectory's own dict, in place: what the next call is handed."""
    if isinstance(state, dict) and isinstance(after, dict):
        state.clear()
        state.update(after)


def _ask(path: str, request: dict[str, Any], limits: Limits) -> dict[str, Any]:
    """One confined run of the tool at `path`; its JSON answer, or {"error": why}."""
    # where the roles import from ("": the folder they run in)
    paths = json.dumps([p or os.getcwd() for p in sys.path])
    got = run([sys.executable, "-c", RUNNER, path, paths], json.dumps(request), limits)
    if not got.ok:
        return {"error": got.error}
    try:
        out: dict[str, Any] = json.loads(got.stdout.strip().splitlines()[-1])
        return out
    except (ValueError, IndexError):
        return {"error": "the tool answered no JSON"}


@dataclass
class SandboxedTool:
    """A `Tool` (seq/tools.py) whose every call runs in the sandbox."""

    path: str
    name: str
    schema: dict[str, Any]
    limits: Limits

    def describe(self) -> dict[str, Any]:
        return self.schema

    def start(self) -> Any:
        got = _ask(self.path, {"op": "start"}, self.limits)
        return got.get("state")

    def call(self, arguments: dict[str, Any], state: Any) -> str:
        got = _ask(self.path, {"op": "call", "arguments": arguments, "state": state},
                   self.limits)
        if "error" in got:
            return f"error: {got['error']}"
        carry_state(state, got.get("state"))
        return str(got.get("text", ""))


# what each tool said of itself, by path and limits: a job's settings are read (and
# its tools checked) several times in one process, and each reading would otherwise
# start a sandboxed process per tool
_DESCRIBED: dict[tuple[str, Limits], dict[str, Any]] = {}


def sandboxed(path: str, key: str, limits: Limits | None = None) -> SandboxedTool:
    """The tool at `path`, its name and schema read in the sandbox (once a process);
    ValueError naming `key` when it cannot be read there."""
    L = limits or Limits()
    got = _DESCRIBED.get((path, L)) or _ask(path, {"op": "describe"}, L)
    if "error" in got or not isinstance(got.get("name"), str):
        raise ValueError(f"{key}: {path!r} does not describe itself in the sandbox: "
                         f"{got.get('error', 'no name')} (a tool is a class made with no "
                         f"arguments, with name, describe(), start() and call(arguments, "
                         f"state), importable as pkg.module:Tool)")
    _DESCRIBED[path, L] = got
    return SandboxedTool(path, got["name"], got.get("describe") or {}, L)
