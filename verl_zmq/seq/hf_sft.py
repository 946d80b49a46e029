"""Supervised warm start of a Hugging Face model on a prompt file: each record's
prompt (chat template, generation prompt) followed by its response (the ground
truth, or the column `response_key` names, as verl's SFT reads
`extra_info.answer`) and the end token, trained by cross-entropy on the response
tokens only (a multi-turn demonstration's tool answers left out), with verl's
SFT optimiser (a warmup, then a cosine decay; the gradient norm clipped);
validated by greedy exact match on the val file; written as a Hugging Face
folder that a GRPO job's `algorithm.policy.path` names (its initial and
reference policy)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..algos.base import clip_grad_norm, step_if_finite
from .agent_loop import segments
from .hf import pad_left, response_logprobs

__all__ = ["run_hf_sft"]


RESPONSE_KEY = "reward_model.ground_truth"


def response_texts(path: str | list[str], key: str) -> list[str]:
    """Each row's SFT response from column `key` of the file (or files, in order),
    dotted into nested dicts (verl's `response_key` with `response_dict_keys`:
    "extra_info.answer"); a ValueError naming the file, the row and the key where a
    row lacks it."""
    from .data import files_of, rows_of

    if len(files_of(path)) > 1:
        return [t for one in files_of(path) for t in response_texts(one, key)]
    path = files_of(path)[0]
    out = []
    for i, row in enumerate(rows_of(Path(path))):
        v: Any = row
        for part in key.split("."):
            if not isinstance(v, dict) or part not in v or v[part] is None:
                raise ValueError(f"{path}: row {i}: no {key!r} (the SFT response column: "
                                 f"--response-key names it, dotted into a dict, e.g. "
                                 f"extra_info.answer)")
            v = v[part]
        out.append(str(v))
    return out


def _pairs(algo: Any, response_key: str
           ) -> tuple[list[list[int]], list[list[int]], list[list[int]], list[str], list[Any]]:
    """The prompts, the responses' ids, which of those are learned (1; 0 where a
    tool wrote them), their texts, and the records, row for row (the records
    `filter_overlong_prompts` kept, each with its own row's response)."""
    from .data import files_of
    from .prompts import encode_prompts

    s = algo.settings
    enc = encode_prompts(s.train_files, algo.tok, s)
    by_row = {(str(Path(f)), i): t for f in files_of(s.train_files)
              for i, t in enumerate(response_texts(f, response_key))}
    texts = [by_row[r.file, r.row] for r in enc.records]
    answers, learned = [], []
    for t in texts:
        ids, keep = _tokens(algo.tok, t, bool(s.tool_paths))
        answers.append(ids[:s.max_response_length - 1] + [algo.eos])
        learned.append(keep[:s.max_response_length - 1] + [1])
    return enc.ids, answers, learned, texts, enc.records


def _tokens(tok: Any, text: str, tools: bool) -> tuple[list[int], list[int]]:
    """A response's token ids and which are learned: with tools, the tools' answers
    (`<tool_response>...</tool_response>`) are tokenized apart, as a multi-turn
    rollout appends them, and never learned."""
    if not tools:
        ids = tok(text, add_special_tokens=False).input_ids
        return ids, [1] * len(ids)
    out: list[int] = []
    keep: list[int] = []
    for piece, by_tool in segments(text):
        ids = tok(piece, add_special_tokens=False).input_ids
        out += ids
        keep += [0 if by_tool else 1] * len(ids)
    return out, keep


def scorable(algo: Any, records: list[Any], texts: list[str], sample: int = 200) -> float:
    """The mean score, under the job's reward, of the SFT responses themselves (the
    first `sample` rows): what a model that learned them exactly would score."""
    from .scoring import load_compute_score, score_response

    s = algo.settings
    fn = load_compute_score(s.rule, "environment.kwargs.reward", s.reward_name)
    got = []
    for r, text in zip(records[:sample], texts[:sample], strict=True):
        try:
            got.append(score_response(fn, r.data_source, text, r.ground_truth,
                                      r.extra_info).score)
        except Exception:  # a user's scorer: a failure scores 0, as in the samplers
            got.append(0.0)
    return float(np.mean(got)) if got else 0.0


def _responses(answers: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids padded on the right, and their mask."""
    resp = torch.full((len(answers), max(map(len, answers))), pad, dtype=torch.long)
    mask = torch.zeros_like(resp)
    for j, a in enumerate(answers):
        resp[j, :len(a)] = torch.as_tensor(a)
        mask[j, :len(a)] = 1
    return resp, mask


def sft_lr_factor(i: int, steps: int, warmup: int, kind: str) -> float:
    """The share of the step size at step `i` (from 0): rising linearly over
    `warmup` steps, then constant or a cosine down to 0 at `steps`."""
    if i < warmup:
        return (i + 1) / warmup
    if kind == "constant":
        return 1.0
    return 0.5 * (1.0 + math.cos(math.pi * (i - warmup) / max(1, steps - warmup)))


def run_hf_sft(job: Any, steps: int, out: str, batch_prompts: int = 64, lr: float = 1e-3,
               stop_at_accuracy: float | None = None, eval_every: int = 50,
               report: Callable[[dict], None] | None = None,
               response_key: str = RESPONSE_KEY,
               warn: Callable[[str], None] | None = None,
               schedule: tuple[str, float, float] = ("cosine", 0.1, 1.0)) -> Any:
    """Train the job's model on its train file's responses (`response_key`: the
    ground truth, or e.g. the worked solution `extra_info.answer`) for `steps`
    steps (or until greedy accuracy on the val file reaches `stop_at_accuracy`);
    write the folder. `warn` hears when the responses themselves score low under
    the job's reward: a model that learns them would too. `schedule`: verl's SFT
    optimiser, (lr_scheduler "cosine" or "constant", warmup_steps_ratio, clip_grad)."""
    from ..algos import make_algorithm
    from ..envs.make import env_spec
    from .sft import SFTResult

    torch.manual_seed(job.experiment.seed)
    algo = make_algorithm(job, env_spec(job.environment))
    prompts, answers, learned, texts, records = _pairs(algo, response_key)
    ceiling = scorable(algo, records, texts)
    if warn is not None and ceiling < 0.5:
        reward = algo.settings.rule or "the built-in scorer by data source"
        warn(f"the SFT responses ({response_key}) score {ceiling:.2f} on average under the "
             f"job's reward ({reward}): a model that learns them will score about that. "
             f"GSM8K's strict rule wants a worked solution ending in '#### N': train on it "
             f"(--response-key extra_info.answer, where verl's preprocessing keeps it), or "
             f"choose a reward that scores these responses")
    model = algo.model
    trained = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.Adam(trained, lr=lr)
    kind, warmup_ratio, clip = schedule
    sched = torch.optim.lr_scheduler.LambdaLR(opt, partial(
        sft_lr_factor, steps=steps, warmup=int(warmup_ratio * steps), kind=kind))
    rng = np.random.default_rng(job.experiment.seed)
    t0 = time.monotonic()
    acc, step = 0.0, 0
    for step in range(1, steps + 1):
        idx = rng.integers(0, len(prompts), batch_prompts)
        p, pm = pad_left([prompts[i] for i in idx], algo.pad)
        resp, rm = _responses([answers[i] for i in idx], algo.pad)
        lm, _ = _responses([learned[i] for i in idx], 0)
        logp = response_logprobs(model, p, pm, resp, rm)
        loss = -((logp * lm).sum() / lm.sum().clamp(min=1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        step_if_finite(opt, clip_grad_norm(trained, clip))
        sched.step()
        if step % eval_every == 0 or step == steps:
            acc = float(algo.validate().mean())
            if report is not None:
                report({"step": step, "loss": round(float(loss.detach()), 4), "accuracy": acc,
                        "seconds": round(time.monotonic() - t0, 1)})
            if stop_at_accuracy is not None and acc >= stop_at_accuracy:
                break
    algo.save_pretrained(Path(out))
    return SFTResult(step, acc, time.monotonic() - t0, out)
