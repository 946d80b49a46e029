"""DAPO's local update: PPO with the decoupled clip (ratio clipped to
[1 - clip_low, 1 + clip_high]), the policy loss averaged over every step of
the batch ("step-mean") or per fragment column first ("fragment-mean"), and
dynamic sampling: fragments whose advantages are all within a tolerance of
zero carry no learning signal and can be dropped by the peer before an update.
Each is a job-file switch, so an ablation is one flag."""

from __future__ import annotations

import numpy as np
import torch

from ..batch import bootstrap
from .ppo import PPO, compute_gae


def fragment_mean(per_step: torch.Tensor, column: torch.Tensor) -> torch.Tensor:
    """Mean over columns (one env's steps within one fragment) of each column's mean."""
    cols, inv = torch.unique(column, return_inverse=True)
    sums = torch.zeros(len(cols), dtype=per_step.dtype, device=per_step.device)
    counts = torch.zeros_like(sums)
    sums.index_add_(0, inv, per_step)
    counts.index_add_(0, inv, torch.ones_like(per_step))
    return (sums / counts).mean()


class DAPO(PPO):
    """PPO with decoupled clip, selectable loss aggregation, dynamic sampling."""

    name = "dapo"

    def _clip(self) -> tuple[float, float]:
        return self.params.clip_low, self.params.clip_high

    def aggregate(self, per_step: torch.Tensor, mb: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.params.loss_agg == "fragment-mean":
            return fragment_mean(per_step, mb["column"])
        return per_step.mean()

    def fragment_filter(self):
        """Dynamic sampling: drop fragments that carry no learning signal."""
        return self.informative if self.params.dynamic_sampling else None

    def informative(self, frag: dict[str, np.ndarray]) -> bool:
        """False when every valid step's advantage is within `dynamic_tolerance` of 0."""
        p = self.params
        adv, _ = compute_gae(frag["reward"], frag["value"], frag["terminated"],
                             frag["truncated"], frag["valid"], frag[bootstrap("value")],
                             p.gamma, p.gae_lambda)
        valid = np.asarray(frag["valid"], bool)
        return bool(valid.any() and np.abs(adv[valid]).max() > p.dynamic_tolerance)


ALGORITHM = DAPO
