"""Scoring a code answer by running its tests in the sandbox: the built-in scorer
of the code task (data source `toy/code`), and a pattern for scorers of one's own.

The response is Python that defines `f`; the ground truth is its test cases as
JSON, `[[argument, expected], ...]`. A harness of its own runs in a confined
process (`verl_zmq.sandbox`: CPU time, memory, file size, processes, a
wall-clock timeout, and as root no network and files read-only but its own
folder), reads the code and the cases from its standard input, runs the code
in a fresh namespace and prints the share of cases `f` passes. Code that loops,
allocates without end, forks, writes or connects is stopped by the sandbox and
scores 0; nothing of it runs in the scorer's process.
"""

from __future__ import annotations

import json
from typing import Any

from ..sandbox import Limits, run_python

__all__ = ["CODE_SOURCE", "code_score"]

CODE_SOURCE = "toy/code"
LIMITS = Limits(wall_s=5.0, cpu_s=2, memory_mb=256, file_mb=1, processes=4,
                output_bytes=4096)
HARNESS = """
import json, sys
given = json.loads(sys.stdin.read())
ns = {}
exec(given["code"], ns)
f = ns["f"]
passed = 0
for arg, want in given["cases"]:
    try:
        passed += f(arg) == want
    except Exception:
        pass
print("passed", passed / len(given["cases"]))
"""


def code_score(solution: str, ground_truth: Any, limits: Limits = LIMITS) -> dict[str, float]:
    """The share of the test cases the response's `f` passes (the reward), and
    whether it passes them all (`acc`); 0 when it does not run in its limits."""
    cases = json.loads(ground_truth) if isinstance(ground_truth, str) else ground_truth
    got = run_python(HARNESS, json.dumps({"code": solution, "cases": cases}), limits)
    share = 0.0
    if got.ok:
        last = (got.stdout.strip().splitlines() or [""])[-1].split()
        if len(last) == 2 and last[0] == "passed":
            share = float(last[1])
    return {"score": share, "acc": float(share == 1.0)}
