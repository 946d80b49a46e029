"""Supervised warm start of a Hugging Face model on a prompt file: each record's
prompt (chat template, generation prompt) followed by its ground truth and the
end token, trained by cross-entropy on the response tokens only; validated by
greedy exact match on the val file; written as a Hugging Face folder that a GRPO
job's `algorithm.policy.path` names (its initial and reference policy)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .hf import pad_left

__all__ = ["run_hf_sft"]


def _pairs(algo: Any) -> tuple[list[list[int]], list[list[int]]]:
    from .prompts import encode_prompts

    s = algo.settings
    enc = encode_prompts(s.train_files, algo.tok, s)
    answers = [algo.tok(r.ground_truth, add_special_tokens=False).input_ids[
        :s.max_response_length - 1] + [algo.eos] for r in enc.records]
    return enc.ids, answers


def run_hf_sft(job: Any, steps: int, out: str, batch_prompts: int = 64, lr: float = 1e-3,
               stop_at_accuracy: float | None = None, eval_every: int = 50,
               report: Callable[[dict], None] | None = None) -> Any:
    """Train the job's model on its train file's answers for `steps` steps (or until
    greedy accuracy on the val file reaches `stop_at_accuracy`); write the folder."""
    from ..algos import make_algorithm
    from ..envs.make import env_spec
    from .sft import SFTResult

    torch.manual_seed(job.experiment.seed)
    algo = make_algorithm(job, env_spec(job.environment))
    prompts, answers = _pairs(algo)
    model = algo.model
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
    rng = np.random.default_rng(job.experiment.seed)
    t0 = time.monotonic()
    acc, step = 0.0, 0
    for step in range(1, steps + 1):
        idx = rng.integers(0, len(prompts), batch_prompts)
        p, pm = pad_left([prompts[i] for i in idx], algo.pad)
        R = max(len(answers[i]) for i in idx)
        resp = torch.full((len(idx), R), algo.pad, dtype=torch.long)
        rm = torch.zeros((len(idx), R), dtype=torch.long)
        for j, i in enumerate(idx):
            resp[j, :len(answers[i])] = torch.as_tensor(answers[i])
            rm[j, :len(answers[i])] = 1
        from .hf import response_logprobs

        logp = response_logprobs(model, p, pm, resp, rm)
        loss = -(logp.sum() / rm.sum())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % eval_every == 0 or step == steps:
            acc = float(algo.validate().mean())
            if report is not None:
                report({"step": step, "loss": round(float(loss.detach()), 4), "accuracy": acc,
                        "seconds": round(time.monotonic() - t0, 1)})
            if stop_at_accuracy is not None and acc >= stop_at_accuracy:
                break
    algo.save_pretrained(Path(out))
    return SFTResult(step, acc, time.monotonic() - t0, out)
