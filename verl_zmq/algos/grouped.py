"""The critic-free advantage estimators of post-training, registered in
`core.py`'s table: a batch's responses (each column's k-th episode) scored, then
compared within their group (grpo, rloo) or turned into per-token returns
(reinforce_plus_plus); DAPO's overlong penalty; and the minibatches of whole
responses a grouped learner trains on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .core import AdvantageInput, Advantages, register_advantage

__all__ = ["Responses", "group_advantages", "group_signal", "overlong_penalty",
           "response_minibatches", "responses", "sequence_horizon", "whiten"]


def group_advantages(scores: np.ndarray, counted: np.ndarray, group_size: int,
                     std_normalize: bool = True, eps: float = 1e-6
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Group-normalised advantages of responses [N, K] (column n, its k-th response;
    columns n // group_size answer the same prompts). Responses not `counted`
    (dropped, or not ended) take no part and get 0. Returns (advantages, whether
    each group [N // G, K] had a signal: at least two counted responses whose
    scores are not all equal)."""
    N, K = scores.shape
    G = group_size
    s = scores.reshape(N // G, G, K)
    c = counted.reshape(N // G, G, K).astype(np.float64)
    n = c.sum(1)
    mean = (s * c).sum(1) / np.maximum(n, 1)
    var = (((s - mean[:, None]) ** 2) * c).sum(1) / np.maximum(n - 1, 1)  # unbiased
    std = np.sqrt(var)
    adv = s - mean[:, None]
    if std_normalize:
        adv = adv / (std[:, None] + eps)
    signal = (n >= 2) & (std > eps)
    adv = np.where((c > 0) & signal[:, None], adv, 0.0)
    return adv.reshape(N, K).astype(np.float32), signal


@dataclass
class Responses:
    """A grouped batch's responses [N, K] (column n's k-th): scores (rewards summed,
    an overlong penalty included), lengths, which were counted (ended and scored),
    and each step's place: `cols`/`ordinal` index [N, K] from [T, N], `learn` marks
    the steps learned from."""

    scores: np.ndarray
    lengths: np.ndarray
    counted: np.ndarray
    cols: np.ndarray
    ordinal: np.ndarray
    learn: np.ndarray

    def on_steps(self, per_response: np.ndarray) -> np.ndarray:
        """A value per response on each of its learned steps, [T, N] (0 elsewhere)."""
        return np.where(self.learn, per_response[self.cols, self.ordinal], 0.0
                        ).astype(np.float32)


def overlong_penalty(lengths: np.ndarray, max_response: int, buffer: int,
                     factor: float) -> np.ndarray:
    """DAPO's soft overlong punishment (Yu et al. 2025): 0 up to `max_response -
    buffer` tokens, then falling linearly to `-factor` at `max_response`."""
    if buffer <= 0 or max_response <= 0:
        return np.zeros(lengths.shape, np.float64)
    exceed = lengths - (max_response - buffer)
    return np.minimum(-exceed / buffer * factor, 0.0)


def responses(x: AdvantageInput) -> Responses:
    """The responses of a grouped batch, scored (see `Responses`)."""
    p = x.params
    learn = np.asarray(x.batch["valid"], bool)
    N, K = x.how.shape
    cols = np.broadcast_to(np.arange(N), learn.shape)
    scores = np.zeros((N, K), np.float64)
    lengths = np.zeros((N, K), np.int64)
    np.add.at(scores, (cols[learn], x.ordinal[learn]), np.asarray(x.batch["reward"])[learn])
    np.add.at(lengths, (cols[learn], x.ordinal[learn]), 1)
    scores += overlong_penalty(lengths, x.max_response, p.overlong_buffer_len,
                               p.overlong_penalty_factor)
    return Responses(scores, lengths, x.how == 1, cols, x.ordinal, learn)


def response_stats(r: Responses, x: AdvantageInput, signal: np.ndarray) -> dict[str, float]:
    """What a grouped estimator reports, in today's names and in verl's."""
    counted, how, G = r.counted, x.how, x.group_size
    N, K = how.shape
    got = bool(counted.any())
    answered = counted.reshape(N // G, -1, K).sum(1) > 0
    score = float(r.scores[counted].mean()) if got else 0.0
    length = float(r.lengths[counted].mean()) if got else 0.0
    clipped = float((r.lengths[counted] >= x.max_response).mean()) \
        if got and x.max_response else 0.0
    return {
        "grpo/reward_mean": score,
        "grpo/reward_std": float(r.scores[counted].std()) if got else 0.0,
        "grpo/response_length": length,
        "grpo/responses": float(counted.sum()),
        "grpo/dropped": float((how == 2).sum()),
        "grpo/no_signal_groups": float(1.0 - signal[answered].mean())
        if answered.any() else 0.0,
        "critic/score/mean": score, "response_length/mean": length,
        "response_length/clip_ratio": clipped}


def group_signal(scores: np.ndarray, counted: np.ndarray, G: int, eps: float = 1e-6
                  ) -> np.ndarray:
    """Per group [N // G, K]: at least two counted responses whose scores differ."""
    N, K = scores.shape
    s = scores.reshape(N // G, G, K)
    c = counted.reshape(N // G, G, K)
    hi = np.where(c, s, -np.inf).max(1)
    lo = np.where(c, s, np.inf).min(1)
    out: np.ndarray = (c.sum(1) >= 2) & (hi - lo > eps)
    return out


@register_advantage("grpo")
def grpo_advantages(x: AdvantageInput) -> Advantages:
    """Each counted response's score (its rewards summed: a KL penalty in the reward
    included) against its group's (Shao et al. 2024), on every one of its tokens;
    no critic: returns and values are zeros."""
    r = responses(x)
    adv, signal = group_advantages(r.scores, r.counted, x.group_size, x.params.std_normalize)
    step_adv = r.on_steps(adv)
    zeros = np.zeros_like(step_adv)
    return Advantages(step_adv, zeros, zeros, response_stats(r, x, signal))


@register_advantage("rloo")
def rloo_advantages(x: AdvantageInput) -> Advantages:
    """REINFORCE leave-one-out (Ahmadian et al. 2024): each response's score against
    the mean of the other counted responses of its group, on every token; a
    response alone in its group keeps its score (as verl's does)."""
    r, G = responses(x), x.group_size
    N, K = r.scores.shape
    s = r.scores.reshape(N // G, G, K)
    c = r.counted.reshape(N // G, G, K).astype(np.float64)
    n = c.sum(1, keepdims=True)
    others = ((s * c).sum(1, keepdims=True) - s) / np.maximum(n - 1, 1)
    adv = np.where(n > 1, s - others, s) * c
    step_adv = r.on_steps(adv.reshape(N, K))
    zeros = np.zeros_like(step_adv)
    return Advantages(step_adv, zeros, zeros,
                      response_stats(r, x, group_signal(r.scores, r.counted, G)))


def whiten(x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """(x - mean) / std over the masked entries (0 elsewhere), verl's masked_whiten."""
    if not mask.any():
        return np.zeros_like(x, np.float32)
    v = x[mask].astype(np.float64)
    out = (x - v.mean()) / np.sqrt(v.var() + 1e-8)
    return np.where(mask, out, 0.0).astype(np.float32)


@register_advantage("reinforce_plus_plus")
def reinforce_pp_advantages(x: AdvantageInput) -> Advantages:
    """REINFORCE++ (Hu 2025): each token's discounted return to its response's end
    (per-token rewards: a KL penalty in the reward included; the score, with any
    overlong penalty, on the last token), whitened over the batch's tokens. No
    groups needed."""
    r = responses(x)
    b, gamma = x.batch, float(x.params.gamma)
    reward = np.where(r.learn, np.asarray(b["reward"], np.float64), 0.0)
    last = r.learn & (np.asarray(b["terminated"], bool) | np.asarray(b["truncated"], bool))
    # the overlong penalty is a response's: it joins the reward on its last token
    extra = r.scores - _summed(reward, r)
    reward = reward + np.where(last, extra[r.cols, r.ordinal], 0.0)
    ret = np.zeros_like(reward)
    running = np.zeros(reward.shape[1])
    for t in reversed(range(reward.shape[0])):
        running = np.where(r.learn[t], reward[t] + gamma * running * ~last[t], 0.0)
        ret[t] = running
    adv = whiten(ret, r.learn)
    zeros = np.zeros_like(adv)
    return Advantages(adv, ret.astype(np.float32), zeros,
                      response_stats(r, x, group_signal(r.scores, r.counted,
                                                         x.group_size)))


def _summed(reward: np.ndarray, r: Responses) -> np.ndarray:
    out = np.zeros(r.scores.shape, np.float64)
    np.add.at(out, (r.cols[r.learn], r.ordinal[r.learn]), reward[r.learn])
    return out


@register_advantage("reinforce_plus_plus_baseline")
def reinforce_pp_baseline_advantages(x: AdvantageInput) -> Advantages:
    """REINFORCE++ with a baseline: each counted response's score less its group's
    mean, on every token, whitened over the batch's tokens."""
    r, G = responses(x), x.group_size
    adv, signal = group_advantages(r.scores, r.counted, G, std_normalize=False)
    centred = r.on_steps(adv)
    mask = r.learn & r.counted[r.cols, r.ordinal]
    step_adv = whiten(centred, mask)
    zeros = np.zeros_like(step_adv)
    return Advantages(step_adv, zeros, zeros, response_stats(r, x, signal))


def sequence_horizon(job: Any) -> int:
    """A grouped sequence env's longest response in tokens (0 for any other env)."""
    from ..envs.families import grouped

    g = grouped(job.environment.id)
    return g.horizon(job.environment.kwargs) if g is not None else 0


def response_minibatches(seq: torch.Tensor, n: int, mbs: int,
                         shuffle: bool = True) -> list[torch.Tensor]:
    """Minibatch indices over `n` steps of whole responses (`seq`: each step's
    response), shuffled (or in order, drawing nothing from the RNG), about `mbs`
    steps each."""
    ids, inv = torch.unique(seq, return_inverse=True)
    order = torch.randperm(len(ids), device=seq.device) if shuffle else \
        torch.arange(len(ids), device=seq.device)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(len(ids), device=seq.device)
    by_response = torch.argsort(rank[inv], stable=True)  # steps, responses shuffled
    per = max(1, round(len(ids) * mbs / max(n, 1)))  # responses per minibatch
    cuts = torch.searchsorted(rank[inv][by_response],
                              torch.arange(per, len(ids), per, device=seq.device))
    return [c for c in torch.tensor_split(by_response, cuts.cpu()) if len(c)]


def minibatch_indices(n: int, mbs: int, seq: torch.Tensor, whole_responses: bool,
                      count: int | None = None, shuffle: bool = True) -> list[torch.Tensor]:
    """An epoch's minibatch indices over `n` steps: whole responses of about `mbs`
    tokens each (sequence tasks), else `mbs` steps each, or `count` parts (a peer
    reducing gradients takes as many as every other peer, whatever its batch
    holds). Shuffled, the last part short of `mbs` steps is left out; in order
    (`shuffle` false), every step is in one part."""
    if whole_responses:
        return response_minibatches(seq, n, mbs, shuffle)
    order = torch.randperm(n, device=seq.device) if shuffle else \
        torch.arange(n, device=seq.device)
    if count is not None:  # (n varies: steps after an episode's end are void)
        return list(torch.tensor_split(order, max(1, min(n, count))))
    if not shuffle:
        return list(torch.tensor_split(order, list(range(mbs, n, mbs))))
    return [order[s:s + mbs] for s in range(0, n - mbs + 1, mbs)]
