"""Value normalisation (`algorithm.params.normalize_value`): the critic learns
its targets scaled to mean 0 and standard deviation 1 by running statistics of
every return seen, and its outputs are scaled back wherever a value is read
(MAPPO's value normalisation, Yu et al. 2022; Sample Factory's normalised
returns). The statistics are buffers of the policy module, so they travel with
the params and a sampler's recorded values are scaled as the learner's."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

# the smallest scale: a batch of equal returns must not blow the targets up
MIN_SCALE = 1e-4


class ValueNorm(nn.Module):
    """Running mean, variance and count of value targets (Chan et al.'s merge), and
    `scale`, their standard deviation floored at `MIN_SCALE`."""

    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor
    scale: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        for name, init in (("mean", 0.0), ("var", 1.0), ("count", 0.0), ("scale", 1.0)):
            self.register_buffer(name, torch.tensor(init, dtype=torch.float32))

    @torch.no_grad()
    def update(self, targets: np.ndarray) -> None:
        """Fold in a batch of returns (the steps learned from)."""
        x = np.asarray(targets, np.float64).reshape(-1)
        if not x.size:
            return
        n, m, v = float(self.count), float(self.mean), float(self.var)
        k, bm, bv = float(x.size), float(x.mean()), float(x.var())
        total = n + k
        delta = bm - m
        mean = m + delta * k / total
        var = (v * n + bv * k + delta * delta * n * k / total) / total
        self.mean.fill_(mean)
        self.var.fill_(var)
        self.count.fill_(total)
        self.scale.fill_(max(var ** 0.5, MIN_SCALE))

    def normalize(self, y: torch.Tensor) -> torch.Tensor:
        return (y - self.mean) / self.scale

    def denormalize(self, v: torch.Tensor) -> torch.Tensor:
        return v * self.scale + self.mean


def attach_value_norm(net: nn.Module, wanted: bool, recurrent: bool,
                      device: str | torch.device) -> ValueNorm | None:
    """A `ValueNorm` registered as the policy module's `value_norm` (so its
    statistics travel with the params and checkpoints) where the job asks for one."""
    if not wanted:
        return None
    if recurrent:
        raise ValueError("algorithm.params.normalize_value: not with recurrent policies; "
                         "leave it false")
    norm = ValueNorm().to(device)
    net.add_module("value_norm", norm)
    return norm


def in_returns(norm: ValueNorm | None, v: torch.Tensor) -> torch.Tensor:
    """The critic's output in the returns' units (scaled back where it is normalised)."""
    return v if norm is None else norm.denormalize(v)
