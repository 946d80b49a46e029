"""A Hugging Face learner's batch as model input: the prompts a fragment carries
made tensors, and one update's responses with what is learned from them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["Responses", "micro_batches", "prompt_tensors"]


@dataclass
class Responses:
    """One update's responses [N, ...]: left-padded prompts and their mask, the
    responses and their mask, behaviour and reference log-probabilities,
    advantages, which tokens are learned from and which responses counted, and
    the estimator's metrics."""

    prompt: torch.Tensor
    pmask: torch.Tensor
    resp: torch.Tensor
    rmask: torch.Tensor
    old: torch.Tensor
    adv: torch.Tensor
    ref: torch.Tensor | None
    learn: np.ndarray
    counted: np.ndarray
    stats: dict[str, float]
    # with a value head (PPO): each token's return, and its value as the update began
    ret: torch.Tensor | None = None
    value: torch.Tensor | None = None
    prox: torch.Tensor | None = None  # decoupled_loss: the policy's as the update began


def prompt_tensors(prompt: np.ndarray, pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A fragment's prompt column (left-padded with -1) as model input: ids, mask;
    columns no prompt reaches are cut (the fragment's width is the job's
    `max_prompt_length`: compute on the padding would be a third of an update)."""
    p = torch.as_tensor(np.asarray(prompt, np.int64))
    real = p >= 0
    used = real.any(0).nonzero()
    first = int(used[0]) if len(used) else p.shape[1] - 1
    p, real = p[:, first:], real[:, first:]
    return torch.where(real, p, torch.full_like(p, pad)), real.long()


def micro_batches(r: Responses, idx: np.ndarray, responses: int, tokens: int
                  ) -> list[np.ndarray]:
    """A minibatch's responses in the forward passes it is computed in: one, or
    `responses` each (verl's micro batch), or at most `tokens` prompt + response
    tokens each (at least one response; verl's dynamic batch)."""
    if responses:
        return [idx[lo:lo + responses] for lo in range(0, len(idx), responses)]
    if not tokens:
        return [idx]
    sizes = (r.pmask[idx].sum(1) + r.rmask[idx].sum(1)).tolist()
    out: list[list[int]] = [[]]
    used = 0
    for i, n in zip(idx.tolist(), sizes, strict=True):
        if out[-1] and used + n > tokens:
            out.append([])
            used = 0
        out[-1].append(i)
        used += n
    return [np.asarray(o, np.int64) for o in out]
