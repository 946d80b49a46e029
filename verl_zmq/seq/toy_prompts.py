"""Toy prompt files in verl's columns, written offline (no data set can be
downloaded where tests and benchmarks run): reverse a string of digits, or
add two numbers in GSM8K's answer format (`#### N`). `verl data` writes them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["toy_rows", "write_prompts"]


def toy_rows(task: str, n: int, seed: int, min_len: int = 3, max_len: int = 4
             ) -> list[dict[str, Any]]:
    """`n` records of a toy task: "reverse" (data source `toy/reverse`, exact match)
    or "add" (`gsm8k`: the answer after `#### `); `extra_info.answer` is a
    response the job's reward scores 1 (the worked solution for "add")."""
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
        else:
            raise ValueError(f"toy task {task!r}: expected reverse or add")
        rows.append({"data_source": source,
                     "prompt": [{"role": "user", "content": question}],
                     "ability": task,
                     "reward_model": {"style": "rule", "ground_truth": truth},
                     # verl's preprocessing keeps the question and the worked
                     # solution here (`verl sft --response-key extra_info.answer`)
                     "extra_info": {"split": "toy", "index": i, "question": question,
                                    "answer": answer}})
    return rows


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
