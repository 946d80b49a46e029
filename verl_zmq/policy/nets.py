"""Networks built from the job's `[algorithm.policy]` section."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from ..config import Policy
from ..envs.spec import EnvSpec
from .encoders import ObsEncoder
from .layers import mlp
from .net import PolicyNet

__all__ = ["ActorCritic", "actor_critic", "flat_grad", "mlp", "obs_dim", "set_flat_grad"]

def obs_dim(spec: EnvSpec) -> int:
    return int(np.prod(spec.obs_shape))


class ActorCritic(PolicyNet):
    """Separate policy and value MLPs on the observation's features (`ObsEncoder`);
    a categorical, multi-categorical, Bernoulli or diagonal-Gaussian policy."""

    def __init__(self, spec: EnvSpec, policy: Policy):
        super().__init__()
        self.set_actions(spec)
        self.features = ObsEncoder(spec, policy)
        n = self.features.units
        # a centralised critic's state (the last leaves) is read by the value alone
        self.actor_units = spec.actor_width if spec.critic_only else n
        self.pi = mlp(self.actor_units, policy.hidden_sizes, spec.n_actions, policy.activation,
                      0.01)
        self.v = mlp(n, policy.hidden_sizes, 1, policy.activation, 1.0)
        if spec.continuous:
            self.log_std = nn.Parameter(torch.full((spec.n_actions,), policy.log_std_init))
        self._memo: tuple[Any, Any, Any] = (None, None, None)

    def _features(self, obs: Any) -> torch.Tensor:
        # a structured observation's features are computed once for both heads
        if not self.features.structured:
            out: torch.Tensor = self.features(obs)
            return out
        key = torch.is_grad_enabled()
        if self._memo[0] is obs and self._memo[1] == key:
            memo: torch.Tensor = self._memo[2]
            return memo
        h: torch.Tensor = self.features(obs)
        self._memo = (obs, key, h)
        return h

    def dist(self, obs: torch.Tensor, seq: torch.Tensor | None = None, acting: bool = False
             ) -> torch.distributions.Distribution:
        """The policy at each observation (`seq`, the episode of each, and `acting`
        are for sequence models: see `seq/model.py`)."""
        return self.make_dist(self.masked(self._head(self._features(obs)), obs))

    def _head(self, h: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.pi(h[:, :self.actor_units])
        return out

    def value(self, obs: torch.Tensor, seq: torch.Tensor | None = None,
              acting: bool = False) -> torch.Tensor:
        out: torch.Tensor = self.v(self._features(obs)).squeeze(-1)
        return out

    def head_out(self, obs: torch.Tensor) -> torch.Tensor:
        return self.masked(self._head(self.features(obs)), obs)



def actor_critic(spec: EnvSpec, policy: Policy) -> PolicyNet:
    """The policy-gradient network for `policy.kind`, `policy.recurrent` and
    `policy.encoder`: MLPs, a causal transformer over token observations
    (`seq/model.py`), an LSTM or GRU core (`recurrent.py`), or a convolutional
    encoder over images (`policy/cnn.py`)."""
    if policy.kind != "mlp":  # a family's kind (the sequence family's transformer)
        from .kinds import network

        build = network(policy.kind)
        if build is None:
            raise ValueError(f"algorithm.policy.kind: no network of kind {policy.kind!r}")
        net: PolicyNet = build(spec, policy)
        return net
    if policy.network:  # one of the user's own
        from .own import OwnNet

        return OwnNet(spec, policy)
    if policy.recurrent:
        from .recurrent import RecurrentActorCritic

        return RecurrentActorCritic(spec, policy)
    if policy.encoder != "mlp" and not spec.structured:
        from .cnn import PixelActorCritic

        return PixelActorCritic(spec, policy)
    return ActorCritic(spec, policy)


def flat_grad(params: Sequence[torch.Tensor], device: torch.device | str = "cpu") -> torch.Tensor:
    """Every parameter's gradient (zeros where there is none) as one float32 vector:
    what gradient averaging sends and sums."""
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).detach()
                      .reshape(-1).float().to(device) for p in params])


def set_flat_grad(params: Sequence[torch.Tensor], flat: torch.Tensor) -> None:
    """The inverse of `flat_grad`: each parameter's `.grad` from its slice of `flat`."""
    at = 0
    for p in params:
        n = p.numel()
        p.grad = flat[at:at + n].reshape(p.shape).to(p.device, p.dtype)
        at += n
