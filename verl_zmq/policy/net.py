"""The interface every policy-gradient network implements (`PolicyNet`)."""

from __future__ import annotations

from typing import cast

import torch
from torch import nn

Distribution = torch.distributions.Distribution


class PolicyNet(nn.Module):
    """What the policy-gradient family calls on its network (`ActorCritic`,
    `pixels.cnn.PixelActorCritic`, `seq.model.TokenActorCritic`): the policy at
    each observation, values, log-probabilities, entropies and the mode; `pi`
    is the policy head (exported alone). `seq` (each step's episode) and
    `acting` (one step per env) are for sequence models."""

    pi: nn.Module
    discrete: bool

    def dist(self, obs: torch.Tensor, seq: torch.Tensor | None = None,
             acting: bool = False) -> Distribution:
        raise NotImplementedError

    def value(self, obs: torch.Tensor, seq: torch.Tensor | None = None,
              acting: bool = False) -> torch.Tensor:
        raise NotImplementedError

    def log_prob(self, d: Distribution, a: torch.Tensor) -> torch.Tensor:
        lp: torch.Tensor = d.log_prob(a)
        return lp if self.discrete else lp.sum(-1)

    def entropy(self, d: Distribution) -> torch.Tensor:
        e: torch.Tensor = d.entropy()
        return e if self.discrete else e.sum(-1)

    def mode(self, d: Distribution) -> torch.Tensor:
        out: torch.Tensor = (cast(torch.distributions.Categorical, d).probs.argmax(-1)
                             if self.discrete else d.mean)
        return out
