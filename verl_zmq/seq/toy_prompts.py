"""Toy prompt files in verl's columns, written offline (no data set can be
downloaded where tests and benchmarks run): reverse a string of digits, or
add two numbers in GSM8K's answer format (`#### N`), multiply two numbers with
the calculator tool, write a function checked by its tests in the sandbox, or
one-step word problems in GSM8K's style with worked
solutions. `verl data` writes them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from .code_score import CODE_SOURCE
from .scoring import CALC_SOURCE

__all__ = ["toy_rows", "write_prompts"]


def toy_rows(task: str, n: int, seed: int, min_len: int = 3, max_len: int = 4
             ) -> list[dict[str, Any]]:
    """`n` records of a toy task: "reverse" (data source `toy/reverse`, exact match),
    "add" (`gsm8k`: the answer after `#### `), "calc" (`toy/calc`: multiply two
    numbers of `min_len` to `max_len` digits, the final answer after the last tool
    answer matched exactly), "code" (`toy/code`: write a function, its test cases,
    as JSON, the ground truth, run in the sandbox), or "gsm8k" (one-step word
    problems with verl's GSM8K
    instruction, data source `openai/gsm8k`); `extra_info.answer` is a response the
    job's reward scores 1 (the worked solution for "add" and "gsm8k", a calculator
    call and the copied result for "calc", the function for "code")."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        if task == "reverse":
            k = int(rng.integers(min_len, max_len + 1))
            digits = "".join(str(d) for d in rng.integers(0, 10, k))
            question, answer, source = f"reverse {digits}", digits[::-1], "toy/reverse"
            truth = answer
        elif task == "add":
            a, b = (int(x) for x in rng.integers(0, 10 ** min_len, 2))
            question, source = f"{a}+{b}=?", "gsm8k"
            truth = str(a + b)
            # the worked solution, as GSM8K's answer column ends: what SFT trains on
            answer = f"{a}+{b}={truth}\n#### {truth}"
        elif task == "calc":
            # too large to multiply in a tiny model's head: the demonstration calls
            # the calculator and copies its answer
            a, b = (int(x) for x in rng.integers(10 ** (min_len - 1), 10 ** max_len, 2))
            question, source, truth = f"What is {a}*{b}?", CALC_SOURCE, str(a * b)
            call = json.dumps({"name": "calc", "arguments": {"expression": f"{a}*{b}"}},
                              separators=(",", ":"))
            answer = f"<tool_call>{call}</tool_call><tool_response>{truth}</tool_response>{truth}"
        elif task == "code":
            # a function to write, checked by running its test cases in the sandbox
            a, b = (int(x) for x in rng.integers(2, 10 ** min_len, 2))
            op = ("+", "*", "-")[int(rng.integers(3))]
            question = f"Write a Python function f(x) that returns x{op}{a} plus {b}."
            source = CODE_SOURCE
            cases = [[x, eval_op(x, op, a) + b] for x in (0, 1, 7, -3, 12)]
            truth, answer = json.dumps(cases), f"def f(x):\n    return x{op}{a}+{b}"
        elif task == "gsm8k":
            question, answer, truth = _word_problem(rng, min_len)
            source = "openai/gsm8k"
            question += " " + GSM8K_INSTRUCTION
        else:
            raise ValueError(f"toy task {task!r}: expected reverse, add, calc, code or gsm8k")
        rows.append({"data_source": source,
                     "prompt": [{"role": "user", "content": question}],
                     "ability": task,
                     "reward_model": {"style": "rule", "ground_truth": truth},
                     # verl's preprocessing keeps the question and the worked
                     # solution here (`verl sft --response-key extra_info.answer`)
                     "extra_info": {"split": "toy", "index": i, "question": question,
                                    "answer": answer}})
    return rows


def eval_op(x: int, op: str, a: int) -> int:
    """x op a for the code task's cases (computed here, never evaluated as code)."""
    return {"+": x + a, "*": x * a, "-": x - a}[op]


# what verl's examples/data_preprocess/gsm8k.py appends to every question
GSM8K_INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
_NAMES = ("Tom", "Ann", "Sam", "Mia", "Leo", "Ivy")


def _word_problem(rng: np.random.Generator, digits: int) -> tuple[str, str, str]:
    """A one-step word problem in GSM8K's style: the question, a worked solution
    ending in `#### N`, and N."""
    a, b = (int(x) for x in rng.integers(1, 10 ** digits, 2))
    name = _NAMES[int(rng.integers(len(_NAMES)))]
    kind = int(rng.integers(3))
    if kind == 0:
        q = f"{name} has {a} apples and buys {b} more. How many apples does {name} have?"
        n, work = a + b, f"{name} has {a} + {b} = {a + b} apples."
    elif kind == 1:
        a, b = max(a, b), min(a, b)
        q = f"{name} had {a} marbles and gave away {b}. How many marbles are left?"
        n, work = a - b, f"{a} - {b} = {a - b} marbles are left."
    else:
        q = f"A pen costs {a} dollars. How much do {b} pens cost?"
        n, work = a * b, f"{b} pens cost {b} * {a} = {a * b} dollars."
    return q, f"{work}\n#### {n}", str(n)


def write_prompts(path: str | Path, rows: list[dict[str, Any]]) -> Path:
    """Rows to `.parquet` (pyarrow) or `.jsonl`, as the suffix says."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    if p.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), p)
    else:
        p.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return p
