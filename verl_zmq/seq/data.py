"""Prompt files in verl's columns: parquet (pyarrow, the `llm` extra) or JSON
lines, one record per row:

    data_source   str                          which scorer, and the metrics' group
    prompt        [{"role": ..., "content": ...}, ...]   a chat
    ability       str                          (optional)
    reward_model  {"style": "rule", "ground_truth": ...}
    extra_info    {...}                        (optional; passed to the scorer)

A bad row is a `DataError` that names the file, the row and the column. The
chat is made a prompt string with the tokenizer's chat template (generation
prompt added) where it has one, else with a plain built-in one. Each epoch
deals every prompt once across the samplers (`epoch_share`). Torch-free.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["DataError", "PromptRecord", "chat_prompt", "epoch_share", "files_of", "fit_prompt",
           "read_prompts"]

ROLES = ("system", "user", "assistant", "tool")


class DataError(ValueError):
    """A prompt file that cannot be read as verl's columns (file, row, column named)."""


@dataclass(frozen=True)
class PromptRecord:
    """One row of a prompt file (see the module)."""

    data_source: str
    messages: tuple[tuple[str, str], ...]  # (role, content)
    ground_truth: str
    ability: str = ""
    extra_info: dict[str, Any] = field(default_factory=dict)
    row: int = 0
    file: str = ""  # the file it was read from (a job may name several)


def rows_of(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise DataError(f"{path}: reading parquet needs pyarrow "
                            f"(pip install 'verl-zmq[llm]'), or give a .jsonl file") from None
        try:
            # ParquetFile, not read_table: the latter imports pandas (0.35 s of a core
            # in every role that reads prompts)
            rows: list[dict[str, Any]] = pq.ParquetFile(path).read().to_pylist()
        except Exception as e:  # pyarrow raises its own kinds on a bad file
            raise DataError(f"{path}: not a readable parquet file: {e}") from None
        return rows
    if path.suffix in (".jsonl", ".json"):
        out = []
        with open(path, encoding="utf-8") as f:
            for i, line in enumerate(f):
                if not line.strip():
                    continue
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise DataError(f"{path}: row {i}: not JSON: {e.msg}") from None
        return out
    raise DataError(f"{path}: expected a .parquet or .jsonl file")


def parse_chat(chat: Any, bad: Callable[[str], Exception]) -> tuple[tuple[str, str], ...]:
    """A prompt column's chat as (role, content) turns: a list of {role, content}
    messages, or a bare string (one user turn); `bad(what was expected)` otherwise."""
    if isinstance(chat, str):
        chat = [{"role": "user", "content": chat}]
    if not isinstance(chat, list | tuple) or not chat:
        raise bad("a non-empty list of {role, content} messages")
    messages = []
    for m in chat:
        if not (isinstance(m, dict) and m.get("role") in ROLES
                and isinstance(m.get("content"), str)):
            raise bad(f"messages with a role ({', '.join(ROLES)}) and a string content, "
                      f"got {str(m)[:60]}")
        messages.append((m["role"], m["content"]))
    return tuple(messages)


def _record(path: Path, i: int, row: Any, prompt_key: str = "prompt",
            reward_fn_key: str = "data_source") -> PromptRecord:
    def bad(column: str, expected: str) -> DataError:
        return DataError(f"{path}: row {i}: column {column!r}: expected {expected}")

    if not isinstance(row, dict):
        raise DataError(f"{path}: row {i}: expected a record (a JSON object)")
    source = row.get(reward_fn_key)
    if not isinstance(source, str) or not source:
        raise bad(reward_fn_key, "a non-empty string")
    messages = parse_chat(row.get(prompt_key), lambda what: bad(prompt_key, what))
    rm = row.get("reward_model")
    if not isinstance(rm, dict) or rm.get("ground_truth") is None:
        raise bad("reward_model", "a record with a ground_truth")
    extra = row.get("extra_info") or {}
    if not isinstance(extra, dict):
        raise bad("extra_info", "a record")
    return PromptRecord(source, messages, str(rm["ground_truth"]),
                        str(row.get("ability") or ""), extra, i, str(path))


def read_prompts(path: str | Path | Sequence[str], prompt_key: str = "prompt",
                 reward_fn_key: str = "data_source") -> list[PromptRecord]:
    """Every record of a prompt file, or of several in order (verl's list of
    train files); the chat from column `prompt_key` and the scorer's data source
    from `reward_fn_key` (verl's names for them); a DataError on the first bad row."""
    if not isinstance(path, str | Path):
        return [r for one in path for r in read_prompts(one, prompt_key, reward_fn_key)]
    p = Path(path)
    if not p.is_file():
        raise DataError(f"{p}: no such file")
    records = [_record(p, i, row, prompt_key, reward_fn_key) for i, row in enumerate(rows_of(p))]
    if not records:
        raise DataError(f"{p}: no records")
    return records


def files_of(value: str | Sequence[str]) -> list[str]:
    """A job's `train_files` or `val_files`: one path, or a list of them."""
    return [value] if isinstance(value, str) else list(value)


def chat_prompt(messages: Sequence[tuple[str, str]], tokenizer: Any = None,
                tools: Sequence[dict[str, Any]] = ()) -> str:
    """The prompt string of a chat, ending where the assistant's answer begins: the
    tokenizer's chat template (with the generation prompt, and the `tools`'
    schemas for a template that shows them) where it has one, else one line per
    turn, `<|role|>content`, then `<|assistant|>`."""
    if tokenizer is not None and getattr(tokenizer, "chat_template", None):
        text: str = tokenizer.apply_chat_template(
            [{"role": r, "content": c} for r, c in messages], tokenize=False,
            add_generation_prompt=True, tools=list(tools) or None)
        return text
    return "".join(f"<|{r}|>{c}\n" for r, c in messages) + "<|assistant|>"


def fit_prompt(ids: Sequence[int], max_len: int, truncation: str, where: str) -> list[int]:
    """A prompt's token ids within `max_len`: "error" refuses a longer one (naming
    `where`, the file and row), "left" keeps its end, "right" its start."""
    if len(ids) <= max_len:
        return list(ids)
    if truncation == "left":
        return list(ids[len(ids) - max_len:])
    if truncation == "right":
        return list(ids[:max_len])
    if truncation == "error":
        raise DataError(f"{where}: the prompt is {len(ids)} tokens, over max_prompt_length "
                        f"{max_len} (truncation = \"left\" or \"right\" cuts it)")
    raise ValueError(f"truncation {truncation!r}: expected error, left or right")


def epoch_share(n: int, epoch: int, worker: int, workers: int, seed: int = 0) -> np.ndarray:
    """The prompt indices sampler `worker` of `workers` serves in `epoch`: one
    shuffle per epoch (the same on every sampler: seeded by the job's seed and the
    epoch) dealt round-robin, so every prompt is served once per epoch."""
    order = np.random.default_rng([seed, epoch]).permutation(n)
    share: np.ndarray = order[worker::workers]
    return share
