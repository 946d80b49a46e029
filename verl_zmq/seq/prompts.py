"""Post-training on prompt files: the job's settings (environment id
`verl/Prompts-v0`, its kwargs in verl's names) and the deck of prompts a
sampler serves. Torch-free.

A prompt job has no env to step: each sampler reads the train file, takes its
share of each epoch's shuffle (`data.epoch_share`), and generates a group of
`group_size` responses per prompt (`seq/generate.py`). Its fragments are
`[max_response_length, responses]`: one column per response, one row per
response token (`action`: the token id, `logp`: its behaviour
log-probability, `valid`: the response's mask, the score as the reward of its
last token), and beside them the left-padded prompts, `prompt [responses,
max_prompt_length]`. Bytes grow linearly with the response length.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from ..sandbox import Limits
from .data import (
    PromptRecord,
    chat_prompt,
    epoch_share,
    files_of,
    fit_prompt,
    read_prompts,
)
from .reward_model import check_reward_model

__all__ = ["PROMPTS_ID", "PromptDeck", "PromptSettings", "encode_prompts", "is_prompt_env",
           "length_problems", "prompt_lengths", "prompt_settings"]

PROMPTS_ID = "verl/Prompts-v0"
MODEL_REWARD = "model:"  # reward = "model:PATH": a learned reward model alone
PROMPT = "prompt"  # the fragment's per-response column of prompt token ids


def is_prompt_env(env_id: str) -> bool:
    return env_id == PROMPTS_ID


@dataclass(frozen=True)
class PromptSettings:
    """`environment.kwargs` of a prompt job, in verl's names (`data.*` and
    `actor_rollout_ref.rollout.*`): the files, the lengths, how a long prompt is
    cut, the scorer (`reward`: "" built in by data source, "gsm8k",
    "exact_match", `module:compute_score`, or a file, `my_reward.py` with
    `reward_name`, or `my_reward.py:fn`; or "model:PATH", a learned reward model
    alone), a reward model added to the rule (`reward_model`), what a failed
    score counts as, and the sampling of responses (`group_size` is rollout `n`)."""

    train_files: str | list[str] = ""  # a file, or a list of them read in order
    val_files: str | list[str] = ""  # see train_files
    prompt_key: str = "prompt"  # the column of the chat (verl's data.prompt_key)
    reward_fn_key: str = "data_source"  # the column that picks the scorer (verl's)
    reward: str = ""
    # a reward file's function (verl's custom_reward_function.name)
    reward_name: str = "compute_score"
    on_error: str = "zero"
    reward_timeout_s: float = 10.0  # a scorer call that takes longer is counted, scored as on_error
    # a learned reward model (a local AutoModelForSequenceClassification folder, verl's
    # reward_model.model.path), served by the job's reward-model roles: the training
    # reward is the rule's score plus reward_model_weight x the model's
    reward_model: str = ""
    reward_model_weight: float = 1.0
    group_size: int = 8
    max_prompt_length: int = 64
    max_response_length: int = 32
    truncation: str = "error"
    # verl's filter_overlong_prompts: a prompt over max_prompt_length is left out of
    # the deck (counted in the log) instead of refused or cut
    filter_overlong_prompts: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    val_n: int = 1  # responses per val prompt: greedy when 1 (mean@1), sampled otherwise
    val_temperature: float = 0.0  # val_n > 1: the val responses' temperature (0: temperature)
    val_prompts: int = 0  # 0: all of the val file
    # verl's trainer.total_epochs: passes over the train prompts (those kept) as the
    # job's budget, training.total_timesteps made epochs x prompts x group_size x
    # max_response_length (token slots); 0: training.total_timesteps as written
    total_epochs: int = 0
    # multi-turn rollouts (seq/agent_loop.py): the tools a response may call, by
    # import path ("calc": the built-in calculator); none: one turn, no tools
    tools: str | list[str] = ""
    max_assistant_turns: int = 2  # verl's multi_turn.max_assistant_turns
    max_turn_tokens: int = 0  # model tokens a turn (0: what is left of the response)
    max_tool_response_length: int = 64  # tokens of one tool answer (verl's name)
    # one sandboxed call's wall-clock limit (its CPU time: as many seconds, rounded up);
    # a call past it answers "error: timed out"
    tool_timeout_s: float = 10.0

    @property
    def tool_paths(self) -> list[str]:
        return [self.tools] if isinstance(self.tools, str) and self.tools else \
            list(self.tools or [])

    @property
    def reward_model_path(self) -> str:
        """The reward model's folder ("": none): `reward = "model:PATH"` or
        `reward_model`."""
        return self.reward[len(MODEL_REWARD):] if self.reward.startswith(MODEL_REWARD) \
            else self.reward_model

    @property
    def rule(self) -> str:
        """The rule scorer: `reward`, or the built-in one by data source where `reward`
        names a model (what validation scores by, and its training reward ignores)."""
        return "" if self.reward.startswith(MODEL_REWARD) else self.reward

    @property
    def tool_limits(self) -> Limits:
        """What one sandboxed tool call may use."""
        return Limits(wall_s=self.tool_timeout_s, cpu_s=max(1, math.ceil(self.tool_timeout_s)))


def prompt_settings(kwargs: Mapping[str, Any], where: str = "environment.kwargs"
                    ) -> PromptSettings:
    """The settings from a job's env kwargs; ValueError naming the key otherwise."""
    known = {f.name: f for f in fields(PromptSettings)}
    out: dict[str, Any] = {}
    for k, v in kwargs.items():
        if k not in known:
            raise ValueError(f"{where}.{k}: unknown for {PROMPTS_ID} (known: "
                             f"{', '.join(known)})")
        want = type(known[k].default)
        if want is float and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        if k in ("train_files", "val_files", "tools") and isinstance(v, list | tuple):
            if not all(isinstance(x, str) and x for x in v) or not (v or k == "tools"):
                raise ValueError(f"{where}.{k}: expected a path or a list of paths, got {v!r}")
            out[k] = list(v)
            continue
        if not isinstance(v, want) or (isinstance(v, bool) and want is not bool):
            raise ValueError(f"{where}.{k}: expected {want.__name__}, got {v!r}")
        out[k] = v
    s = PromptSettings(**out)
    _check_values(s, where)
    return s


def _check_reward(s: PromptSettings, where: str) -> None:
    if s.reward_model and s.reward.startswith(MODEL_REWARD):
        raise ValueError(f"{where}.reward_model: set with reward = \"model:...\" as well; "
                         f"keep one (reward_model adds the model to a rule reward)")
    if s.reward_model_path:
        check_reward_model(s.reward_model_path, f"{where}.reward_model" if s.reward_model
                           else f"{where}.reward")
    if s.reward_timeout_s <= 0:
        raise ValueError(f"{where}.reward_timeout_s: must be positive")


def _check_values(s: PromptSettings, where: str) -> None:
    """ValueError naming the first setting out of its range."""
    if not s.train_files:
        raise ValueError(f"{where}.train_files: {PROMPTS_ID} needs a prompt file "
                         f"(.parquet or .jsonl in verl's columns)")
    if s.truncation not in ("error", "left", "right"):
        raise ValueError(f"{where}.truncation: {s.truncation!r}: expected error, left or right")
    if s.on_error not in ("zero", "drop"):
        raise ValueError(f"{where}.on_error: {s.on_error!r}: expected zero or drop")
    for k in ("group_size", "max_prompt_length", "max_response_length", "val_n",
              "max_assistant_turns", "max_tool_response_length"):
        if getattr(s, k) < 1:
            raise ValueError(f"{where}.{k}: must be at least 1")
    if not s.tool_timeout_s > 0:
        raise ValueError(f"{where}.tool_timeout_s: must be above 0 (seconds)")
    if s.tool_paths:
        from .tools import load_tools

        load_tools(s.tool_paths, f"{where}.tools", s.tool_limits)  # ValueError naming the path
    if s.max_turn_tokens < 0:
        raise ValueError(f"{where}.max_turn_tokens: 0 (no cap a turn) or more")
    if s.total_epochs < 0:
        raise ValueError(f"{where}.total_epochs: 0 (the budget is training.total_timesteps) "
                         f"or more")
    if s.val_temperature < 0:
        raise ValueError(f"{where}.val_temperature: 0 (the rollout's temperature) or more")
    _check_reward(s, where)
    if s.temperature <= 0 or not 0 < s.top_p <= 1 or s.top_k < 0:
        raise ValueError(f"{where}: temperature > 0, 0 < top_p <= 1 and top_k >= 0 expected")


@dataclass(frozen=True)
class Encoded:
    """A prompt file's records and their prompts' token ids."""

    records: list[PromptRecord]
    ids: list[list[int]]


def prompt_lengths(path: str | list[str], tok: Any, s: PromptSettings | None = None
                   ) -> tuple[list[PromptRecord], list[list[int]]]:
    """Every record of `path` (one file or several) and its prompt's token ids (the
    tokenizer's chat template, generation prompt added), uncut."""
    keys = (s.prompt_key, s.reward_fn_key) if s is not None else ("prompt", "data_source")
    records = read_prompts(path, *keys)
    tools = []
    if s is not None and s.tool_paths:  # a template that shows tools gets their schemas
        from .tools import load_tools

        tools = [t.describe() for t in load_tools(s.tool_paths, limits=s.tool_limits).values()]
    ids = [tok(chat_prompt(r.messages, tok, tools), add_special_tokens=False).input_ids
           for r in records]
    return records, ids


def encode_prompts(path: str | list[str], tok: Any, s: PromptSettings) -> Encoded:
    """Every record of `path` (one file or several) with its chat made a prompt and
    fitted to `max_prompt_length` (cut, refused, or with `filter_overlong_prompts`
    left out)."""
    records, raw = prompt_lengths(path, tok, s)
    kept, ids = [], []
    for r, toks in zip(records, raw, strict=True):
        if s.filter_overlong_prompts and len(toks) > s.max_prompt_length:
            continue
        kept.append(r)
        ids.append(fit_prompt(toks, s.max_prompt_length, s.truncation,
                              f"{r.file}: row {r.row}"))
    if not kept:
        raise ValueError(f"{path}: every prompt is over max_prompt_length "
                         f"{s.max_prompt_length} and filter_overlong_prompts leaves none")
    return Encoded(kept, ids)


def epochs_budget(s: PromptSettings, tok: Any) -> int | None:
    """`total_epochs` passes over the train prompts that are kept, in env steps
    (token slots); None without `total_epochs`."""
    if not s.total_epochs:
        return None
    prompts = len(encode_prompts(s.train_files, tok, s).records)
    return s.total_epochs * prompts * s.group_size * s.max_response_length


def length_problems(s: PromptSettings, tok: Any, positions: int | None) -> list[str]:
    """What the files' prompts would break at run time, named before it starts:
    rows over `max_prompt_length` (where nothing cuts or filters them), and prompt
    plus response beyond the model's `positions`."""
    out = []
    if positions is not None and s.max_prompt_length + s.max_response_length > positions:
        out.append(f"environment.kwargs: max_prompt_length {s.max_prompt_length} + "
                   f"max_response_length {s.max_response_length} is over the model's "
                   f"{positions} positions (max_position_embeddings): shorten them")
    if s.truncation != "error" or s.filter_overlong_prompts:
        return out
    for key in ("train_files", "val_files"):
        for path in files_of(getattr(s, key)) if getattr(s, key) else []:
            records, ids = prompt_lengths(path, tok, s)
            over = [(r.row, len(t)) for r, t in zip(records, ids, strict=True)
                    if len(t) > s.max_prompt_length]
            if not over:
                continue
            rows = ", ".join(f"{row} ({n} tokens)" for row, n in over[:5])
            out.append(f"environment.kwargs.{key}: {path}: {len(over)} of {len(records)} "
                       f"prompts are over max_prompt_length {s.max_prompt_length} (rows "
                       f"{rows}{', ...' if len(over) > 5 else ''}; the longest "
                       f"{max(n for _, n in over)}): raise max_prompt_length, or set "
                       f"truncation = \"left\" / \"right\" or filter_overlong_prompts = true")
    return out


class PromptDeck:
    """The prompts one sampler of `workers` serves, epoch after epoch: each epoch one
    shuffle shared by every sampler (seeded by the job's seed and the epoch), dealt
    round-robin, so every prompt is served once per epoch across the samplers.
    `regroup` deals the epochs after this one among the samplers alive now: a
    sampler lost for good leaves no prompts unserved past its epoch."""

    def __init__(self, n: int, worker: int, workers: int, seed: int):
        self.n, self.worker, self.workers, self.seed = n, worker, workers, seed
        self.epoch = 0
        self.queue: list[int] = []
        self.next_group: tuple[int, int] | None = None

    def regroup(self, worker: int, workers: int) -> None:
        """This sampler is the `worker`-th of `workers` alive: from the next epoch
        on (this one's deal stands: the others dealt it the same way)."""
        self.next_group = (worker, max(1, workers))

    def draw(self, k: int) -> list[int]:
        out: list[int] = []
        while len(out) < k:
            if not self.queue:
                if self.next_group is not None:
                    (self.worker, self.workers), self.next_group = self.next_group, None
                share = epoch_share(self.n, self.epoch, self.worker, self.workers, self.seed)
                self.epoch += 1
                # a file with fewer prompts than samplers: this one serves from the whole
                self.queue = share.tolist() if len(share) else \
                    np.random.default_rng([self.seed, self.epoch, self.worker]).permutation(
                        self.n).tolist()
            out.append(self.queue.pop(0))
        return out
