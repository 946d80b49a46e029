"""GRPO (Shao et al. 2024, DeepSeekMath) as verl runs it, at toy scale.

No critic: a sampler's sequence env answers each prompt `group_size` times
(`seq/env.py`, lock-step rounds, so a fragment holds whole groups), and each
response's advantage is its score against its group's: `(r - mean) / std`, or
`r - mean` without the std (Dr. GRPO), for every token of the response. The
policy loss is PPO's clipped surrogate with the decoupled clip, aggregated per
token over the minibatch ("token-mean") or summed per response and averaged
over responses ("seq-mean-token-sum"); minibatches hold whole responses. The
KL to the frozen reference (k1 or k3, `kl_coef`) is a loss term or a per-token
reward penalty (PPO's machinery, `kl_in`).
"""

from __future__ import annotations

import numpy as np
import torch

from ..batch import episodes
from .base import START, Learned, Progress
from .ppo import PPO, clipped_surrogate


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


def seq_mean_token_sum(per_step: torch.Tensor, seq: torch.Tensor) -> torch.Tensor:
    """Sum over each response's tokens, mean over the responses."""
    ids, inv = torch.unique(seq, return_inverse=True)
    sums = torch.zeros(len(ids), dtype=per_step.dtype, device=per_step.device)
    return sums.index_add_(0, inv, per_step).mean()


class GRPO(PPO):
    """Group-relative policy optimisation on sequence tasks (see the module)."""

    name = "grpo"

    def __init__(self, job, spec, device: str = "cpu", **kw):
        super().__init__(job, spec, device, **kw)
        # fit_problem (the base constructor) made sure every fragment holds whole groups
        self.group_size = int(job.environment.kwargs.get("group_size", 1))
        self._seq = torch.zeros(0, dtype=torch.long)
        self._episodes: tuple[np.ndarray, np.ndarray] = (np.zeros(0), np.zeros(0))
        self._stats: dict[str, float] = {}

    def _clip(self) -> tuple[float, float]:
        return self.params.clip_low, self.params.clip_high

    def act(self, obs, deterministic=False, env_steps=0):
        with torch.no_grad():
            d = self.net.dist(torch.as_tensor(obs, dtype=torch.float32, device=self.device),
                              acting=True)
            a = self.net.mode(d) if deterministic else d.sample()
            logp = self.net.log_prob(d, a)
        return a.cpu().numpy(), {"logp": logp.cpu().numpy()}

    def prepare(self, batch, columns=None):
        """Only the tokens of responses that ended within the batch and were scored
        (not dropped) are learned from."""
        valid = np.asarray(batch["valid"], bool)
        ordinal, how = episodes(np.asarray(batch["terminated"], bool),
                                np.asarray(batch["truncated"], bool), valid)
        N, K = how.shape
        cols = np.broadcast_to(np.arange(N), valid.shape)
        self._episodes = (ordinal, how)
        learn = valid & (how == 1)[cols, ordinal]
        data = super().prepare({**batch, "valid": learn}, columns)
        self._seq = data["seq"]
        return data

    def advantages(self, batch):
        """Each counted response's score (its rewards summed: a KL penalty in the
        reward included) against its group's, on every one of its tokens."""
        ordinal, how = self._episodes
        learn = np.asarray(batch["valid"], bool)
        N, K = how.shape
        cols = np.broadcast_to(np.arange(N), learn.shape)
        scores = np.zeros((N, K), np.float64)
        lengths = np.zeros((N, K), np.int64)
        np.add.at(scores, (cols[learn], ordinal[learn]), np.asarray(batch["reward"])[learn])
        np.add.at(lengths, (cols[learn], ordinal[learn]), 1)
        counted = how == 1
        adv, signal = group_advantages(scores, counted, self.group_size,
                                       self.params.std_normalize)
        answered = counted.reshape(N // self.group_size, -1, K).sum(1) > 0
        got = counted.any()
        self._stats = {
            "grpo/reward_mean": float(scores[counted].mean()) if got else 0.0,
            "grpo/reward_std": float(scores[counted].std()) if got else 0.0,
            "grpo/response_length": float(lengths[counted].mean()) if got else 0.0,
            "grpo/responses": float(counted.sum()),
            "grpo/dropped": float((how == 2).sum()),
            "grpo/no_signal_groups": float(1.0 - signal[answered].mean())
            if answered.any() else 0.0}
        step_adv = np.where(learn, adv[cols, ordinal], 0.0).astype(np.float32)
        zeros = np.zeros_like(step_adv)
        return step_adv, zeros, zeros

    def aggregate(self, per_step, mb):
        if self.params.loss_agg == "seq-mean-token-sum":
            return seq_mean_token_sum(per_step, mb["seq"])
        return per_step.mean()

    def _minibatches(self, n, mbs):
        """Whole responses per minibatch, about `minibatch_size` tokens each."""
        ids, inv = torch.unique(self._seq, return_inverse=True)
        order = torch.randperm(len(ids), device=self.device)
        rank = torch.empty_like(order)
        rank[order] = torch.arange(len(ids), device=self.device)
        by_response = torch.argsort(rank[inv], stable=True)  # steps, responses shuffled
        per = max(1, round(len(ids) * mbs / max(n, 1)))  # responses per minibatch
        cuts = torch.searchsorted(rank[inv][by_response],
                                  torch.arange(per, len(ids), per, device=self.device))
        return [c for c in torch.tensor_split(by_response, cuts.cpu()) if len(c)]

    def loss(self, mb):
        p = self.params
        d = self.net.dist(mb["obs"], mb["seq"])
        new_logp = self.net.log_prob(d, mb["action"])
        low, high = self._clip()
        pg, ratio = clipped_surrogate(new_logp, mb["logp"], mb["adv"], low, high)
        pg_loss = self.aggregate(pg, mb)
        entropy = self.net.entropy(d).mean()
        stats: dict = {}
        loss = pg_loss - p.ent_coef * entropy + self.kl_term(new_logp, mb, stats)
        with torch.no_grad():
            log_ratio = new_logp - mb["logp"]
            stats |= {"losses/policy_loss": pg_loss, "losses/entropy": entropy,
                      "losses/approx_kl": ((ratio - 1) - log_ratio).mean(),
                      "losses/clip_fraction":
                          ((ratio < 1 - low) | (ratio > 1 + high)).float().mean()}
        return loss, stats

    def learn(self, batch, at: Progress = START) -> Learned:
        out = super().learn(batch, at)
        out.metrics.update(self._stats)
        for k in ("losses/explained_variance", "losses/value_spread"):  # no critic
            out.metrics.pop(k, None)
        return out


ALGORITHM = GRPO
