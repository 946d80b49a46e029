"""PPO's critic on a Hugging Face model, as verl's `adv_estimator = "gae"` asks for
one: a value head on the policy's last hidden state (the trunk shared), each
response token's value read where the token is drawn, GAE over the tokens
(`algos/core.compute_gae`: the reward at the last token, the per-token KL
penalty where `kl_in = "reward"`), the advantages whitened over the tokens
learned from, and a value loss clipped around the values as the update began
(`clip_range_vf`). For `critic_warmup` updates the head alone learns (the
trunk it reads is held), as verl trains its critic before the actor.
"""

from __future__ import annotations

import numpy as np
import torch


class ValueHead(torch.nn.Module):
    """V(state) from a hidden state, zero at the start (advantages are the returns
    until it learns)."""

    def __init__(self, hidden: int):
        super().__init__()
        self.v = torch.nn.Linear(hidden, 1)
        torch.nn.init.zeros_(self.v.weight)
        torch.nn.init.zeros_(self.v.bias)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.v(h.float()).squeeze(-1)
        return out


def value_loss(v: torch.Tensor, old: torch.Tensor, ret: torch.Tensor, clip: float
               ) -> torch.Tensor:
    """Per-token 0.5 (V - R)^2, and with `clip` > 0 the larger of it and the clipped
    value's (PPO's value clipping)."""
    loss = (v - ret) ** 2
    if clip > 0:
        clipped = old + (v - old).clamp(-clip, clip)
        loss = torch.maximum(loss, (clipped - ret) ** 2)
    return 0.5 * loss


def whiten(adv: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """`adv` less its mean over `mask`, over its std there (verl's masked whitening)."""
    x = adv[mask]
    if x.size < 2:
        return adv
    return np.where(mask, (adv - x.mean()) / (x.std() + 1e-8), 0.0).astype(np.float32)
