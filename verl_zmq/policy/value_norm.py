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

from ..normalize import RunningMeanStd

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
        # the buffers are the state (they load with a checkpoint): merged through
        # the observation statistics' own merge, then written back
        rms = RunningMeanStd((), np.asarray(float(self.mean)), np.asarray(float(self.var)),
                             float(self.count))
        rms.update(x)
        self.mean.fill_(float(rms.mean))
        self.var.fill_(float(rms.var))
        self.count.fill_(rms.count)
        self.scale.fill_(max(float(rms.var) ** 0.5, MIN_SCALE))

    def normalize(self, y: torch.Tensor) -> torch.Tensor:
        return (y - self.mean) / self.scale

    def denormalize(self, v: torch.Tensor) -> torch.Tensor:
        return v * self.scale + self.mean


def attach_value_norm(net: nn.Module, wanted: bool, device: str | torch.device
                      ) -> ValueNorm | None:
    """A `ValueNorm` registered as the policy module's `value_norm` (so its
    statistics travel with the params and checkpoints) where the job asks for one
    (the job check refuses it for recurrent policies)."""
    if not wanted:
        return None
    norm = ValueNorm().to(device)
    net.add_module("value_norm", norm)
    return norm


def in_returns(norm: ValueNorm | None, v: torch.Tensor) -> torch.Tensor:
    """The critic's output in the returns' units (scaled back where it is normalised)."""
    return v if norm is None else norm.denormalize(v)
