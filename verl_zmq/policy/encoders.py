"""The observation encoder of the policy networks: what turns an observation,
plain or structured (`envs/spaces.py`), into one feature vector per step.

A plain observation is flattened, or goes through a convolutional encoder
where `policy.encoder` names one (images). A structured one is encoded per leaf, as
Stable-Baselines3's CombinedExtractor does: Box and MultiBinary leaves
flattened, Discrete ones one-hot (`spaces.features` computes the same in
numpy, so MLP samplers stay torch-free), and image leaves through a
convolutional encoder each (`policy.encoder`, impala_cnn where it is "mlp");
the image features come after the flat ones."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..config import Policy


class ObsEncoder(nn.Module):
    """Observations [B, ...] (a tensor, or {column: tensor}) -> features [B, units]."""

    def __init__(self, spec: Any, policy: Policy):
        super().__init__()
        self.structured = bool(spec.structured)
        self.leaves = tuple(spec.leaves)
        self.images = nn.ModuleDict()
        self.cnn: nn.Module | None = None
        self.units = int(spec.obs_shape[0]) if self.structured else \
            int(torch.tensor(spec.obs_shape).prod())
        from .cnn import encoder

        if not self.structured and policy.encoder != "mlp":
            self.cnn, self.units = encoder(policy.encoder, tuple(spec.obs_shape))
        if self.structured:
            for i, leaf in enumerate(self.leaves):
                if leaf.kind == "image":
                    kind = policy.encoder if policy.encoder != "mlp" else "impala_cnn"
                    self.images[f"l{i}"], units = encoder(kind, leaf.shape)
                    self.units += units

    def forward(self, obs: Any) -> torch.Tensor:
        if self.cnn is not None:
            return self.cnn(obs)  # type: ignore[no-any-return]
        if not self.structured:
            return obs.flatten(1).float()  # type: ignore[no-any-return]
        parts, pics = [], []
        for i, leaf in enumerate(self.leaves):
            x = obs[leaf.column]
            if leaf.kind == "image":
                pics.append(self.images[f"l{i}"](x))
            elif leaf.kind == "discrete":
                parts.append(F.one_hot(x.long().reshape(-1), leaf.n).float())
            else:
                parts.append(x.flatten(1).float())
        return torch.cat(parts + pics, dim=1)


def obs_tensor(obs: Any, device: torch.device) -> Any:
    """Numpy observations as tensors on `device`: plain ones as float32, a structured
    one's leaves in their own dtypes (the encoder converts them)."""
    if isinstance(obs, dict):
        return {k: torch.as_tensor(v, device=device) for k, v in obs.items()}
    return torch.as_tensor(obs, dtype=torch.float32, device=device)


def obs_apply(obs: Any, fn: Any) -> Any:
    """`fn` on an observation's array, or on each of a structured one's."""
    return {k: fn(v) for k, v in obs.items()} if isinstance(obs, dict) else fn(obs)
