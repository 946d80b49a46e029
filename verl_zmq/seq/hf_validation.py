"""Validation of a Hugging Face policy on a prompt job's val file, as verl's
`val-core` metrics: each prompt's score (the mean over `val_n` responses, greedy
when 1), and the per-data-source means and best/worst of n (`mean_at_n`). With
tools, each response is a multi-turn rollout as the samplers draw it."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from .agent_loop import agent_generate, turn_limits
from .hf import Sampling, generate, pad_left
from .prompts import PromptSettings, encode_prompts
from .scoring import load_compute_score, mean_at_n, score_response
from .tools import load_tools

Decode = Callable[[torch.Tensor, torch.Tensor], list[str]]


class Validation:
    """A job's val prompts (the train file's without a val file), encoded once,
    and their scoring under the job's reward."""

    def __init__(self, settings: PromptSettings, tok: object):
        self.settings, self.tok = settings, tok
        self.tools = load_tools(settings.tool_paths, limits=settings.tool_limits) \
            if settings.tool_paths else {}
        enc = encode_prompts(settings.val_files or settings.train_files, tok, settings)
        self.records, self.ids = enc.records, enc.ids

    def run(self, model: torch.nn.Module, decode: Decode, pad: int, eos: int,
            limit: int = 0) -> tuple[np.ndarray, dict[str, float]]:
        """Each of the first `limit` (or `val_prompts`, or all) prompts' score, and
        the metrics."""
        s = self.settings
        n = limit or s.val_prompts or len(self.records)
        records, ids = self.records[:n], self.ids[:n]
        score_fn = load_compute_score(s.rule, "environment.kwargs.reward", s.reward_name)
        greedy = s.val_n == 1
        sampling = Sampling(n=s.val_n, temperature=s.val_temperature or s.temperature,
                            top_p=s.top_p, top_k=s.top_k,
                            max_new_tokens=s.max_response_length, greedy=greedy)
        k = 1 if greedy else s.val_n
        results: list[tuple[str, int, float]] = []
        per_prompt = np.zeros(len(records))
        for lo in range(0, len(records), 64):
            prompt, mask = pad_left(ids[lo:lo + 64], pad)
            if self.tools:  # the same multi-turn rollout as the samplers'
                g = agent_generate(model, self.tok, prompt, mask, sampling, eos, pad,
                                   self.tools, turn_limits(s))
            else:
                g = generate(model, prompt, mask, sampling, eos, pad)
            for j, text in enumerate(decode(g.response, g.mask)):
                at = lo + j // k
                r = records[at]
                try:  # verl's core validation value: the scorer's "acc" where it says one
                    got = score_response(score_fn, r.data_source, text, r.ground_truth,
                                         r.extra_info)
                    sc = got.metrics.get("acc", got.score)
                except Exception:  # a user's scorer: a failure scores 0 here
                    sc = 0.0
                results.append((r.data_source, at, sc))
                per_prompt[at] += sc / k
        return per_prompt, mean_at_n(results)
