"""Scoring decoded responses as verl does: a `compute_score(data_source,
solution_str, ground_truth, extra_info)` named by import path, returning a float
or a dict whose `score` is the reward and whose other numeric keys become
metrics; built in, GSM8K's `#### N` rule (strict, and flexible: the last number)
and exact match, chosen by the record's data source. Torch-free.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..importing import load_object
from .code_score import CODE_SOURCE, code_score
from .tools import RESPONSE_CLOSE

__all__ = ["Score", "ScoreFn", "default_compute_score", "exact_match_score", "gsm8k_answer",
           "gsm8k_score", "load_compute_score", "mean_at_n", "score_response"]

# a regex over a very long string is slow: the answer is at the end, as verl reads it
_TAIL_CHARS = 300
_STRICT = re.compile(r"#### (-?[0-9.,]+)")
_NUMBER = re.compile(r"(-?[0-9.,]+)")

ScoreFn = Callable[..., Any]


def gsm8k_answer(solution: str, method: str = "strict") -> str | None:
    """The final answer of a GSM8K-style response: "strict" takes the last number
    after `#### ` (the format is part of the task), "flexible" the last number
    anywhere; commas and a dollar sign dropped. None when there is none."""
    if method not in ("strict", "flexible"):
        raise ValueError(f"gsm8k method {method!r}: expected strict or flexible")
    tail = solution[-_TAIL_CHARS:]
    if method == "strict":
        found = _STRICT.findall(tail)
        return found[-1].replace(",", "").replace("$", "") if found else None
    numbers = [n for n in _NUMBER.findall(tail) if n not in ("", ".")]
    return numbers[-1] if numbers else None


def gsm8k_score(solution: str, ground_truth: str, method: str = "strict",
                format_score: float = 0.0, score: float = 1.0) -> float:
    """`score` when the extracted answer equals the ground truth, `format_score`
    when an answer was found but is wrong, 0 when none was found."""
    answer = gsm8k_answer(solution, method)
    if answer is None:
        return 0.0
    return score if answer == str(ground_truth).replace(",", "").strip() else format_score


def exact_match_score(solution: str, ground_truth: str) -> float:
    """1 when the response, stripped, is the ground truth, stripped; else 0."""
    return float(solution.strip() == str(ground_truth).strip())


GSM8K_SOURCES = ("openai/gsm8k", "gsm8k")
CALC_SOURCE = "toy/calc"  # the calculator task: exact match of what follows the last tool answer


def final_answer(solution: str) -> str:
    """What a multi-turn response says after its last tool answer (all of it when no
    tool answered)."""
    return solution.rpartition(RESPONSE_CLOSE)[2]


def default_compute_score(data_source: str, solution_str: str, ground_truth: Any,
                          extra_info: Mapping[str, Any] | None = None) -> Any:
    """The built-in scorer by data source: GSM8K's strict rule for `openai/gsm8k`
    (and `gsm8k`), exact match of the final answer for `toy/calc`, the share of
    test cases passed in the sandbox for `toy/code` (`code_score.py`), exact match
    otherwise."""
    if data_source == CODE_SOURCE:
        return code_score(solution_str, ground_truth)
    if data_source in GSM8K_SOURCES:
        return gsm8k_score(solution_str, str(ground_truth))
    if data_source == CALC_SOURCE:
        return exact_match_score(final_answer(solution_str), str(ground_truth))
    return exact_match_score(solution_str, str(ground_truth))


def load_compute_score(path: str, key: str = "algorithm.reward",
                       name: str = "compute_score") -> ScoreFn:
    """The job's scorer: "" for the built-in one, "gsm8k" or "exact_match" for one
    rule, a `module:function` imported (never evaluated), or as verl's
    `custom_reward_function` names it, a Python file: `path/to/file.py` (its
    function `name`) or `path/to/file.py:fn`. A relative file path is read from the
    folder the role runs in, as the data files are."""
    builtin: dict[str, ScoreFn] = {
        "": default_compute_score,
        "gsm8k": lambda ds, s, gt, extra=None: gsm8k_score(s, str(gt)),
        "gsm8k_flexible": lambda ds, s, gt, extra=None: gsm8k_score(s, str(gt), "flexible"),
        "exact_match": lambda ds, s, gt, extra=None: exact_match_score(s, str(gt)),
    }
    if path in builtin:
        return builtin[path]
    file, _, fn_name = path.partition(":") if ".py:" in path else (path, "", name)
    fn = _from_file(file, fn_name, key) if file.endswith(".py") else load_object(path, key)
    if not callable(fn):
        raise ValueError(f"{key} {path!r} is not callable")
    return fn  # type: ignore[no-any-return]


def _from_file(file: str, name: str, key: str) -> Any:
    """Function `name` of the Python file `file`, run as a module of its own (the
    way verl loads `custom_reward_function.path`)."""
    import hashlib
    import importlib.util
    import sys
    from pathlib import Path

    where = Path(file)
    if not where.is_file():
        raise ValueError(f"{key} {file!r}: no such file (from {Path.cwd()}); a reward file "
                         f"must exist at that path on every host that runs a sampler or "
                         f"the evaluator, as the data files must")
    # one module per file, under a name no import can collide with
    mod_name = "_verl_reward_" + hashlib.sha1(str(where.resolve()).encode()).hexdigest()[:12]
    module = sys.modules.get(mod_name)
    if module is None:
        spec = importlib.util.spec_from_file_location(mod_name, where)
        if spec is None or spec.loader is None:
            raise ValueError(f"{key} {file!r}: not a Python file")
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception as e:  # the user's file: its error, named
            raise ValueError(f"{key} {file!r}: loading it raised "
                             f"{type(e).__name__}: {e}") from None
        sys.modules[mod_name] = module
    if not hasattr(module, name):
        raise ValueError(f"{key} {file!r}: defines no function {name!r} (name another "
                         f"with \"{file}:fn\" or environment.kwargs.reward_name)")
    return getattr(module, name)


@dataclass
class Score:
    """One response's reward and the metrics its scorer returned beside it."""

    score: float
    metrics: dict[str, float] = field(default_factory=dict)


def score_response(fn: ScoreFn, data_source: str, solution: str, ground_truth: Any,
                   extra_info: Mapping[str, Any] | None = None) -> Score:
    """Call a verl-style scorer and read its answer: a number, or a dict with a
    numeric `score` (its other numeric keys are metrics). Anything else, or a
    score that is not finite, is a ValueError naming what came back (the caller
    counts it as a failed reward)."""
    out = fn(data_source, solution, ground_truth, dict(extra_info or {}))
    metrics: dict[str, float] = {}
    if isinstance(out, Mapping):
        if "score" not in out:
            raise ValueError(f"the reward function returned a dict without 'score': "
                             f"{sorted(out)[:5]}")
        metrics = {str(k): float(v) for k, v in out.items()
                   if k != "score" and isinstance(v, int | float) and not isinstance(v, bool)}
        out = out["score"]
    if isinstance(out, bool) or not isinstance(out, int | float):
        raise ValueError(f"the reward function returned {type(out).__name__}, "
                         f"expected a number or a dict with 'score'")
    if not math.isfinite(float(out)):
        raise ValueError(f"the reward function returned {out}")
    return Score(float(out), metrics)


def mean_at_n(results: Iterable[tuple[str, int, float]]) -> dict[str, float]:
    """Validation metrics in verl's names from (data source, prompt index, score)
    of every response: `val-core/<source>/acc/mean@N`, N the responses per prompt
    (the mean over prompts of each prompt's mean score)."""
    by: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for source, index, s in results:
        by[source][index].append(float(s))
    out: dict[str, float] = {}
    for source, prompts in sorted(by.items()):
        n = max(len(v) for v in prompts.values())
        means = [sum(v) / len(v) for v in prompts.values()]
        out[f"val-core/{source}/acc/mean@{n}"] = sum(means) / len(means)
    return out
