"""A network of one's own (`[algorithm.policy] network = "module:factory"`) as the
policy-gradient family's `PolicyNet`: `factory(spec, policy)` builds a torch
module whose `forward(obs)` returns the policy head's output (logits, or the
Gaussian's mean, `[B, spec.n_actions]`) and the value (`[B]` or `[B, 1]`); the
action distribution, a Box's learned log-std, log-probabilities and entropies
are this adapter's, as for the built-in networks. It reads observations as the
built-in MLPs do: a plain Box's array, or a structured one's flat features."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..config import Policy
from ..envs.spec import EnvSpec
from ..importing import plug_in
from .encoders import ObsEncoder
from .net import PolicyNet

FACTORY = "(spec: EnvSpec, policy: Policy) -> torch.nn.Module"


class OwnNet(PolicyNet):
    """The adapter; `body` is the user's module."""

    def __init__(self, spec: EnvSpec, policy: Policy):
        super().__init__()
        self.set_actions(spec)
        factory = plug_in(policy.network, "algorithm.policy.network", 2, FACTORY)
        try:
            body = factory(spec, policy)
        except Exception as e:  # the user's code: its own words, with the call it got
            raise ValueError(f"algorithm.policy.network {policy.network!r}: "
                             f"{policy.network.rpartition(':')[2]}(spec, policy) raised "
                             f"{type(e).__name__}: {e}; expected {FACTORY}") from None
        if not isinstance(body, nn.Module):
            raise ValueError(f"algorithm.policy.network {policy.network!r}: the factory "
                             f"returned {type(body).__name__}, not a torch.nn.Module")
        self.features = ObsEncoder(spec, policy) if spec.structured else None
        self.body = body
        self.pi = _Head(self)
        if spec.continuous:
            self.log_std = nn.Parameter(torch.full((spec.n_actions,), policy.log_std_init))
        self._check(spec, policy.network)

    def _check(self, spec: EnvSpec, name: str) -> None:
        """One forward pass on zeros: the outputs' shapes, named when wrong."""
        if spec.structured:
            obs: Any = {leaf.column: torch.zeros((2, *leaf.shape)) for leaf in spec.leaves}
        else:
            obs = torch.zeros((2, *spec.obs_shape))
        try:
            with torch.no_grad():
                head, value = self._forward(obs)
        except Exception as e:
            raise ValueError(f"algorithm.policy.network {name!r}: forward(obs) on 2 "
                             f"observations raised {type(e).__name__}: {e}") from None
        if tuple(head.shape) != (2, spec.n_actions) or value.reshape(-1).shape != (2,):
            raise ValueError(f"algorithm.policy.network {name!r}: forward(obs) for 2 "
                             f"observations gave shapes "
                             f"{tuple(head.shape)} and {tuple(value.shape)}; expected "
                             f"(2, {spec.n_actions}) (the policy head) and (2,) (the value)")

    def _forward(self, obs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.features(obs) if self.features is not None else obs
        out = self.body(x)
        if not (isinstance(out, tuple | list) and len(out) == 2):
            raise ValueError("algorithm.policy.network: forward(obs) must return (head, value)")
        return out[0], out[1].reshape(-1)

    def dist(self, obs: torch.Tensor, seq: torch.Tensor | None = None,
             acting: bool = False) -> torch.distributions.Distribution:
        return self.make_dist(self._forward(obs)[0])

    def value(self, obs: torch.Tensor, seq: torch.Tensor | None = None,
              acting: bool = False) -> torch.Tensor:
        return self._forward(obs)[1]

    def head_out(self, obs: torch.Tensor) -> torch.Tensor:
        return self._forward(obs)[0]


class _Head(nn.Module):
    """The policy head alone (what an exported policy computes)."""

    def __init__(self, net: OwnNet):
        super().__init__()
        self._net = [net]  # not a submodule: the body's parameters are the net's

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self._net[0].head_out(obs)
