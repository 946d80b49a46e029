"""Tools for multi-turn rollouts: the call format, answers that are always text,
state per trajectory, and a calculator that never evaluates code."""

from __future__ import annotations

import pytest

from verl_zmq.seq.tools import (
    RESPONSE_CLOSE,
    RESPONSE_OPEN,
    Calculator,
    Call,
    answer,
    arithmetic,
    last_call,
    load_tools,
)


def test_calls_are_parsed_from_what_the_model_wrote():
    text = ('I will compute. <tool_call>{"name": "calc", "arguments": '
            '{"expression": "3847 * 2918"}}</tool_call>')
    assert last_call(text) == Call("calc", {"expression": "3847 * 2918"})
    assert last_call("the answer is 12\n#### 12") is None
    assert last_call('<tool_call>{"name": "calc", "arguments": "{\\"expression\\": \\"1+1\\"}"}'
                     '</tool_call>') == Call("calc", {"expression": "1+1"})
    assert "not JSON" in last_call("<tool_call>{calc(1)}</tool_call>").error
    assert "name" in last_call('<tool_call>{"arguments": {}}</tool_call>').error
    assert "object" in last_call('<tool_call>{"name": "calc", "arguments": [1]}'
                                 '</tool_call>').error


def test_every_answer_is_text_for_the_model_and_state_is_per_trajectory():
    tools = load_tools(["calc", "tests.tool_examples:Counter"])
    mine: dict = {}
    wrap = (RESPONSE_OPEN, RESPONSE_CLOSE)
    assert answer(Call("calc", {"expression": "6*7"}), tools, mine) == "42".join(wrap)
    assert answer(Call("count", {}), tools, mine) == "1".join(wrap)
    assert answer(Call("count", {}), tools, mine) == "2".join(wrap)
    assert answer(Call("count", {}), tools, {}) == "1".join(wrap)  # another trajectory
    assert "asked to fail" in answer(Call("count", {"fail": True}), tools, mine)
    assert "no tool 'search'" in answer(Call("search", {}), tools, mine)
    assert "not JSON" in answer(Call(error="the call is not JSON (x)"), tools, mine)
    assert answer(Call("calc", {"expression": "1/0"}), tools, mine).startswith(
        RESPONSE_OPEN + "error")
    with pytest.raises(ValueError, match="does not describe itself in the sandbox"):
        load_tools(["tests.tool_examples:NotATool"])
    with pytest.raises(ValueError, match="expected"):
        load_tools(["tests.test_tools"])


@pytest.mark.parametrize("expr,value", [("3847 * 2918", 11225546), ("(2 + 3) * -4", -20),
                                        ("7 // 2 + 7 % 2", 4), ("2 ** 10", 1024),
                                        ("1 / 4", 0.25)])
def test_the_calculator_computes(expr, value):
    assert arithmetic(expr) == value
    assert Calculator().call({"expression": expr}, None) == str(value)


@pytest.mark.parametrize("expr", ["__import__('os').system('true')", "open('/etc/passwd')",
                                  "(1).__class__", "[1, 2]", "lambda: 1", "9 ** 9 ** 9",
                                  "10 ** 40", "x + 1", "1 +"])
def test_the_calculator_never_runs_code_and_bounds_its_numbers(expr):
    with pytest.raises(ValueError):
        arithmetic(expr)
    assert Calculator().call({"expression": expr}, None).startswith("error")


def test_a_tool_of_ones_own_runs_sandboxed_and_every_escape_is_an_error_the_model_reads():
    import os
    import sys

    from verl_zmq.sandbox import Limits, confined
    from verl_zmq.seq.tool_sandbox import SandboxedTool

    tools = load_tools(["tests.tool_examples:Hostile"],
                       limits=Limits(wall_s=4, cpu_s=2, memory_mb=256, processes=8))
    assert isinstance(tools["hostile"], SandboxedTool)  # never imported here
    assert "tests.tool_examples" not in sys.modules
    said = {k: answer(Call("hostile", {"do": k}), tools, {})
            for k in ("fine", "loop", "memory", "fork", "write", "socket")}
    assert said["fine"] == "fine".join((RESPONSE_OPEN, RESPONSE_CLOSE))
    for k in ("loop", "memory", "fork"):
        assert said[k].startswith(RESPONSE_OPEN + "error"), (k, said[k])
    if confined():  # as root: no network, and nothing written outside its folder
        assert said["write"].startswith(RESPONSE_OPEN + "error"), said["write"]
        assert said["socket"].startswith(RESPONSE_OPEN + "error"), said["socket"]
        assert not os.path.exists("/tmp/verl-tool-escaped")
