"""The interface every policy-gradient network implements (`PolicyNet`), and
the action distributions of each action space kind."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

Distribution = torch.distributions.Distribution


class MultiCategorical(Distribution):
    """Independent categoricals over a MultiDiscrete action's entries (`nvec`
    choices each): logits [B, sum(nvec)], actions [B, len(nvec)]; log-probabilities
    and entropies summed over the entries."""

    arg_constraints: dict[str, Any] = {}

    def __init__(self, logits: torch.Tensor, nvec: tuple[int, ...]):
        self.parts = [torch.distributions.Categorical(logits=x, validate_args=False)
                      for x in torch.split(logits, list(nvec), dim=-1)]
        super().__init__(logits.shape[:-1], validate_args=False)

    def sample(self, sample_shape: torch.Size | list[int] | tuple[int, ...] = ()
               ) -> torch.Tensor:
        return torch.stack([p.sample(torch.Size(sample_shape))  # type: ignore[no-untyped-call]
                            for p in self.parts], dim=-1)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        return torch.stack([p.log_prob(value[..., i])  # type: ignore[no-untyped-call]
                            for i, p in enumerate(self.parts)], dim=-1).sum(-1)

    def entropy(self) -> torch.Tensor:
        return torch.stack([p.entropy() for p in self.parts],  # type: ignore[no-untyped-call]
                           dim=-1).sum(-1)

    @property
    def mode(self) -> torch.Tensor:
        return torch.stack([p.logits.argmax(-1) for p in self.parts], dim=-1)


class PolicyNet(nn.Module):
    """What the policy-gradient family calls on its network (`ActorCritic`,
    `recurrent.RecurrentActorCritic`, `cnn.PixelActorCritic`,
    `seq.model.TokenActorCritic`): the policy at each observation, values,
    log-probabilities, entropies and the mode; `pi` is the policy head (exported
    alone). `seq` (each step's episode) and `acting` (one step per env) are for
    sequence models. `kind` is the action space's (envs/spaces.py)."""

    pi: nn.Module
    discrete: bool
    kind: str = ""
    nvec: tuple[int, ...] = ()
    log_std: nn.Parameter
    recurrent: bool = False
    mask: str = ""  # the observation's column of legal actions (EnvSpec.mask)

    def set_actions(self, spec: object) -> None:
        self.kind = spec.kind  # type: ignore[attr-defined]
        self.nvec = spec.nvec  # type: ignore[attr-defined]
        self.mask = getattr(spec, "mask", "")
        self.discrete = self.kind == "discrete"

    def masked(self, out: torch.Tensor, obs: Any) -> torch.Tensor:
        """Logits with the actions the observation's mask forbids pushed to -1e9
        (the probability of each is then 0 in float32 and bfloat16); a row with no
        legal action is left as it is."""
        if not self.mask or not isinstance(obs, dict) or self.mask not in obs:
            return out
        legal = obs[self.mask] > 0.5
        legal = legal | ~legal.any(-1, keepdim=True)
        return out.masked_fill(~legal, -1e9)

    @property
    def action_kind(self) -> str:
        return self.kind or ("discrete" if self.discrete else "box")

    def make_dist(self, out: torch.Tensor) -> Distribution:
        """The distribution a head's output `out` parameterises."""
        kind = self.action_kind
        if kind == "discrete":
            return torch.distributions.Categorical(logits=out, validate_args=False)
        if kind == "multidiscrete":
            return MultiCategorical(out, self.nvec)
        if kind == "multibinary":
            return torch.distributions.Bernoulli(logits=out, validate_args=False)
        return torch.distributions.Normal(out, self.log_std.exp().expand_as(out),
                                          validate_args=False)

    def dist(self, obs: torch.Tensor, seq: torch.Tensor | None = None,
             acting: bool = False) -> Distribution:
        raise NotImplementedError

    def head_out(self, obs: torch.Tensor) -> torch.Tensor:
        """The policy head's output (logits, or the Gaussian's mean) at each
        observation: what an exported policy computes."""
        out: torch.Tensor = self.pi(obs)
        return out

    def value(self, obs: torch.Tensor, seq: torch.Tensor | None = None,
              acting: bool = False) -> torch.Tensor:
        raise NotImplementedError

    def log_prob(self, d: Distribution, a: torch.Tensor) -> torch.Tensor:
        kind = self.action_kind
        if kind == "multibinary":
            return d.log_prob(a.float()).sum(-1)
        lp: torch.Tensor = d.log_prob(a)
        return lp if kind in ("discrete", "multidiscrete") else lp.sum(-1)

    def entropy(self, d: Distribution) -> torch.Tensor:
        e: torch.Tensor = d.entropy()
        return e if self.action_kind in ("discrete", "multidiscrete") else e.sum(-1)

    def sample(self, d: Distribution) -> torch.Tensor:
        a = d.sample()
        return a.long() if self.action_kind == "multibinary" else a

    def mode(self, d: Distribution) -> torch.Tensor:
        kind = self.action_kind
        if kind == "discrete":
            return d.probs.argmax(-1)  # type: ignore[attr-defined,no-any-return]
        if kind == "multidiscrete":
            return d.mode
        if kind == "multibinary":
            return (d.logits > 0).long()  # type: ignore[attr-defined,no-any-return]
        return d.mean


class PolicyHead(nn.Module):
    """An exported policy's head: observations (and a recurrent state, zeros where an
    episode starts) -> the head's output (and the next state)."""

    def __init__(self, net: PolicyNet):
        super().__init__()
        self.net = net
        self.state_size = int(getattr(net, "state_size", 0))

    def forward(self, obs: torch.Tensor, state: torch.Tensor | None = None) -> object:
        if self.net.recurrent:
            out, _, nxt = self.net.step(obs, state, None)  # type: ignore[operator]
            return out, nxt
        return self.net.head_out(obs)
