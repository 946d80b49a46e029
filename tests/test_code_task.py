"""The code task: a response's function is scored by running its test cases in
the sandbox, and whatever the code does, the scorer answers within its limits
with a score, never an exception and never the code running in its process."""

from __future__ import annotations

import os

import pytest

from verl_zmq.sandbox import Limits, confined
from verl_zmq.seq.code_score import code_score
from verl_zmq.seq.scoring import default_compute_score
from verl_zmq.seq.toy_prompts import toy_rows

FAST = Limits(wall_s=4.0, cpu_s=1, memory_mb=256, file_mb=1, processes=4, output_bytes=4096)


def test_the_demonstrations_pass_and_a_wrong_function_passes_less():
    rows = toy_rows("code", 4, seed=0, min_len=1, max_len=1)
    for r in rows:
        got = default_compute_score(r["data_source"], r["extra_info"]["answer"],
                                    r["reward_model"]["ground_truth"])
        assert got == {"score": 1.0, "acc": 1.0}, (r["extra_info"]["answer"], got)
    truth = rows[0]["reward_model"]["ground_truth"]
    assert code_score("def f(x):\n    return 0", truth, FAST)["acc"] == 0.0
    assert code_score("def f(x) return", truth, FAST) == {"score": 0.0, "acc": 0.0}
    assert code_score("print('passed 1.0')", truth, FAST)["score"] == 0.0  # no f: no pass


@pytest.mark.parametrize("code", [
    "def f(x):\n    while True:\n        pass",
    "def f(x):\n    return len(bytearray(10 * 2**30))",
    "import os\nwhile True:\n    os.fork()",
    "print('x' * 10**6)",
])
def test_code_that_loops_allocates_forks_or_floods_scores_zero_within_its_limits(code):
    truth = toy_rows("code", 1, seed=1, min_len=1, max_len=1)[0]["reward_model"]["ground_truth"]
    assert code_score(code, truth, FAST) == {"score": 0.0, "acc": 0.0}


def test_code_cannot_write_outside_its_folder_or_connect_where_confined():
    if not confined():
        pytest.skip("the network and read-only files need root and unshare")
    truth = toy_rows("code", 1, seed=1, min_len=1, max_len=1)[0]["reward_model"]["ground_truth"]
    escape = ("open('/tmp/verl-code-escaped', 'w').write('x')\n"
              "import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=1)\n"
              "def f(x):\n    return 0")
    assert code_score(escape, truth, FAST)["score"] == 0.0
    assert not os.path.exists("/tmp/verl-code-escaped")
