"""Tools a model calls in a multi-turn rollout: the interface, the call format,
and the built-in calculator.

A tool is named by import path (`pkg.module:Tool`, a class made with no
arguments) and answers three things: `describe()`, the function schema a chat
template shows the model (OpenAI's `{"type": "function", "function": {...}}`,
which Hugging Face templates read); `start()`, the state one trajectory keeps
between its calls (a JSON-serialisable dict); `call(arguments, state)`, the
answer as text. A tool of the user's own runs in the sandbox, every call in a
confined process of its own (`tool_sandbox.py`). A call the
model writes is Hermes's format, which Qwen's and Llama's templates use and
verl's tool parser reads:

    <tool_call>{"name": "calc", "arguments": {"expression": "3847 * 2918"}}</tool_call>

and the tool's answer goes back to the model as `<tool_response>...</tool_response>`
tokens, which are never learned from. A call that cannot be parsed, names no
tool, or fails answers with an error the model reads, never an exception.
"""

from __future__ import annotations

import ast
import json
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
RESPONSE_OPEN, RESPONSE_CLOSE = "<tool_response>", "</tool_response>"
_CALL = re.compile(re.escape(CALL_OPEN) + r"(.*?)" + re.escape(CALL_CLOSE), re.S)


@runtime_checkable
class Tool(Protocol):
    """What a tool answers (the module's docstring)."""

    name: str

    def describe(self) -> dict[str, Any]: ...

    def start(self) -> Any: ...

    def call(self, arguments: dict[str, Any], state: Any) -> str: ...


@dataclass(frozen=True)
class Call:
    """A parsed call: the tool's name and its arguments, or why it is not one."""

    name: str = ""
    arguments: dict[str, Any] | None = None
    error: str = ""


def last_call(text: str) -> Call | None:
    """The last complete call in `text` (None: there is none, the turn is an
    answer)."""
    found = _CALL.findall(text)
    if not found:
        return None
    try:
        body = json.loads(found[-1])
    except ValueError as e:
        return Call(error=f"the call is not JSON ({e.msg})")
    if not isinstance(body, dict) or not isinstance(body.get("name"), str):
        return Call(error='the call needs {"name": ..., "arguments": {...}}')
    args = body.get("arguments", {})
    if isinstance(args, str):  # some templates write the arguments as a JSON string
        try:
            args = json.loads(args)
        except ValueError:
            return Call(error="the arguments are not JSON")
    if not isinstance(args, dict):
        return Call(error="the arguments must be an object")
    return Call(body["name"], args)


def answer(call: Call, tools: dict[str, Tool], states: dict[str, Any]) -> str:
    """The tool's answer to `call`, wrapped for the model; errors as text."""
    if call.error:
        text = f"error: {call.error}"
    elif call.name not in tools:
        text = f"error: no tool {call.name!r}; the tools are {', '.join(sorted(tools))}"
    else:
        tool = tools[call.name]
        if call.name not in states:
            states[call.name] = tool.start()
        try:
            text = tool.call(call.arguments or {}, states[call.name])
        except Exception as e:  # a tool's own failure is the model's to read
            text = f"error: {type(e).__name__}: {e}"
    return f"{RESPONSE_OPEN}{text}{RESPONSE_CLOSE}"


# where this process's tool calls go: a sampler or evaluator of a job with tool
# servers routes them there (`roles/tool_client.py`); None: each tool answers here
_route: Callable[[Tool], Tool] | None = None


def route_calls(wrap: Callable[[Tool], Tool] | None) -> None:
    """Have every tool loaded from now on in this process answer through `wrap(tool)`
    (its name and schema kept): a role's way to the job's tool servers."""
    global _route
    _route = wrap


def load_tools(paths: list[str], key: str = "environment.kwargs.tools",
               limits: Any = None) -> dict[str, Tool]:
    """Tools by import path, by name: "calc" is the built-in calculator (it walks a
    syntax tree, never runs code), and any other runs in the sandbox
    (`tool_sandbox.py`, under `limits`, a `sandbox.Limits`): its module is never
    imported here. Where calls are routed (`route_calls`), each tool answers there."""
    from .tool_sandbox import sandboxed

    out: dict[str, Tool] = {}
    for path in paths:
        if path != "calc" and ":" not in path:
            raise ValueError(f"{key}: {path!r}: expected \"calc\" or pkg.module:Tool")
        tool: Tool = Calculator() if path == "calc" else sandboxed(path, key, limits)
        out[tool.name] = _route(tool) if _route is not None else tool
    return out


_OPS: dict[type, Any] = {ast.Add: operator.add, ast.Sub: operator.sub,
                         ast.Mult: operator.mul, ast.Div: operator.truediv,
                         ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
                         ast.Pow: operator.pow}
_LIMIT = 10 ** 30  # results past this are refused: no expression grows without end


def arithmetic(expression: str) -> int | float:
    """An arithmetic expression's value: numbers, + - * / // % ** and brackets,
    walked as a syntax tree (never evaluated as code); ValueError otherwise."""
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise ValueError(f"not an arithmetic expression: {expression[:80]!r}") from None

    def value(node: ast.AST) -> int | float:
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return node.value  # type: ignore[no-any-return]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            v = value(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            left, right = value(node.left), value(node.right)
            if isinstance(node.op, ast.Pow) and (abs(right) > 64 or abs(left) > 10 ** 6):
                raise ValueError("the power is too large")
            out = _OPS[type(node.op)](left, right)
            if abs(out) > _LIMIT:
                raise ValueError("the result is too large")
            return out  # type: ignore[no-any-return]
        raise ValueError(f"only numbers and + - * / // % ** are allowed: {expression[:80]!r}")

    return value(tree.body)


class Calculator:
    """The built-in `calc` tool: an arithmetic expression's value."""

    name = "calc"

    def describe(self) -> dict[str, Any]:
        return {"type": "function", "function": {
            "name": self.name,
            "description": "The value of an arithmetic expression (+ - * / // % **).",
            "parameters": {"type": "object", "required": ["expression"], "properties": {
                "expression": {"type": "string", "description": "for example 3847 * 2918"}}}}}

    def start(self) -> None:
        return None

    def call(self, arguments: dict[str, Any], state: Any) -> str:
        expr = arguments.get("expression")
        if not isinstance(expr, str):
            return 'error: calc needs {"expression": "..."}'
        try:
            v = arithmetic(expr)
        except (ValueError, ZeroDivisionError) as e:
            return f"error: {e}"
        return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)
