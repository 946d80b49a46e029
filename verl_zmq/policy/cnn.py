"""Convolutional encoders for image observations (`[algorithm.policy] encoder`):
"nature_cnn" (Mnih et al. 2015: 8x8/4, 4x4/2, 3x3/1 convolutions, 512 units)
and "impala_cnn" (Espeholt et al. 2018: three stacks of a 3x3 convolution, a
3x3 max-pool of stride 2 and two residual blocks, 16/32/32 channels, 256
units), and the `ActorCritic` interface on top of one.

Observations arrive as stored: uint8 images (H, W, C), channels last as
gymnasium gives them; they become float in [0, 1] here, on the network's device,
never before (samplers and the wire keep them uint8)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..config import Policy
from ..envs.spec import EnvSpec
from .net import PolicyNet


class _Residual(nn.Module):
    def __init__(self, ch: int):
        super().__init__()
        self.c1 = nn.Conv2d(ch, ch, 3, padding=1)
        self.c2 = nn.Conv2d(ch, ch, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = x + self.c2(torch.relu(self.c1(torch.relu(x))))
        return out


def encoder(kind: str, shape: tuple[int, ...]) -> tuple[nn.Module, int]:
    """(module from [B, H, W, C] images to features, the feature size)."""
    if len(shape) != 3:
        raise ValueError(f"algorithm.policy.encoder: {kind} needs image observations "
                         f"(H, W, C); this env's are {shape}")
    H, W, C = shape
    if kind == "nature_cnn":
        body = nn.Sequential(nn.Conv2d(C, 32, 8, 4), nn.ReLU(), nn.Conv2d(32, 64, 4, 2),
                             nn.ReLU(), nn.Conv2d(64, 64, 3, 1), nn.ReLU(), nn.Flatten())
        units = 512
    elif kind == "impala_cnn":
        layers: list[nn.Module] = []
        last = C
        for ch in (16, 32, 32):
            layers += [nn.Conv2d(last, ch, 3, padding=1), nn.MaxPool2d(3, 2, padding=1),
                       _Residual(ch), _Residual(ch)]
            last = ch
        body = nn.Sequential(*layers, nn.ReLU(), nn.Flatten())
        units = 256
    else:
        raise ValueError(f"algorithm.policy.encoder: unknown encoder {kind!r}")
    with torch.no_grad():
        try:
            n = body(torch.zeros(1, C, H, W)).shape[1]
        except RuntimeError:
            raise ValueError(f"algorithm.policy.encoder: {kind} does not fit images of "
                             f"{H}x{W}; use impala_cnn for small images") from None
    return nn.Sequential(_Pixels(), body, nn.Linear(n, units), nn.ReLU()), units


class _Pixels(nn.Module):
    """[B, H, W, C] uint8 (or float of the same values) -> [B, C, H, W] in [0, 1]."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.permute(0, 3, 1, 2).float() / 255.0


class PixelActorCritic(PolicyNet):
    """The `ActorCritic` interface on a shared convolutional encoder: a categorical
    (or diagonal Gaussian) policy head and a value head."""

    def __init__(self, spec: EnvSpec, policy: Policy):
        super().__init__()
        self.set_actions(spec)
        self.encoder, units = encoder(policy.encoder, spec.obs_shape)
        self.pi = nn.Linear(units, spec.n_actions)
        self.v = nn.Linear(units, 1)
        nn.init.orthogonal_(self.pi.weight, 0.01)
        nn.init.zeros_(self.pi.bias)
        if spec.continuous:
            self.log_std = nn.Parameter(torch.full((spec.n_actions,), policy.log_std_init))
        # (the observations, their version and grad mode, the features they gave)
        self._memo: tuple[torch.Tensor | None, tuple[int, bool] | None,
                          torch.Tensor | None] = (None, None, None)

    def _features(self, obs: torch.Tensor) -> torch.Tensor:
        """The encoder's features, kept for a second head's call on the same tensor
        (a PPO loss asks for the policy and the value)."""
        key = (obs._version, torch.is_grad_enabled())
        if self._memo[0] is obs and self._memo[1] == key and self._memo[2] is not None:
            return self._memo[2]
        h: torch.Tensor = self.encoder(obs)
        self._memo = (obs, key, h)
        return h

    def dist(self, obs: torch.Tensor, seq: torch.Tensor | None = None,
             acting: bool = False) -> Any:
        return self.make_dist(self.pi(self._features(obs)))

    def value(self, obs: torch.Tensor, seq: torch.Tensor | None = None,
              acting: bool = False) -> torch.Tensor:
        out: torch.Tensor = self.v(self._features(obs)).squeeze(-1)
        return out

    def head_out(self, obs: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.pi(self.encoder(obs))
        return out


