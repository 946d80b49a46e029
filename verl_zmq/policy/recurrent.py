"""Recurrent policies (`algorithm.policy.recurrent = "lstm"` or `"gru"`): the
observation's features (`ObsEncoder`: flat, structured, or convolutional for
images), an MLP (`hidden_sizes`), an LSTM or GRU core of `recurrent_size`
units, and linear policy and value heads on the core's output.

The state per env is one float32 row: an LSTM's h then c, a GRU's h. It is
zeroed before a step that starts an episode (`first`), whether acting one step
at a time (samplers: `step`) or unrolling a fragment (the learner: `unroll`),
so both compute the same thing from the same columns. `numpy_actor.py` has the
same step in numpy (torch-free samplers), equal to this one within 1e-5.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..config import Policy
from .encoders import ObsEncoder
from .layers import mlp
from .net import Distribution, PolicyNet


class RecurrentActorCritic(PolicyNet):
    """Features -> MLP -> LSTM/GRU core -> policy and value heads."""

    recurrent = True

    def __init__(self, spec: Any, policy: Policy):
        super().__init__()
        self.set_actions(spec)
        self.features = ObsEncoder(spec, policy)
        hidden = list(policy.hidden_sizes)
        self.act_fn = nn.Tanh() if policy.activation == "tanh" else nn.ReLU()
        self.enc = mlp(self.features.units, hidden[:-1], hidden[-1], policy.activation, 2 ** 0.5)
        self.lstm = policy.recurrent == "lstm"
        self.size = policy.recurrent_size
        cell = nn.LSTMCell if self.lstm else nn.GRUCell
        self.core = cell(hidden[-1], self.size)
        self.pi = nn.Linear(self.size, spec.n_actions)
        self.v = nn.Linear(self.size, 1)
        nn.init.orthogonal_(self.pi.weight, 0.01)
        nn.init.zeros_(self.pi.bias)
        nn.init.orthogonal_(self.v.weight, 1.0)
        nn.init.zeros_(self.v.bias)
        if spec.continuous:
            self.log_std = nn.Parameter(torch.full((spec.n_actions,), policy.log_std_init))

    @property
    def state_size(self) -> int:
        return (2 if self.lstm else 1) * self.size

    def _cell(self, x: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        if self.lstm:
            h, c = self.core(x, (state[:, :self.size], state[:, self.size:]))
            return torch.cat([h, c], dim=1)
        out: torch.Tensor = self.core(x, state)
        return out

    def step(self, obs: Any, state: torch.Tensor, first: torch.Tensor | None
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One step of B envs: (head output [B, n], value [B], next state [B, S]);
        `first` marks envs whose episode starts (None: none does)."""
        x = self.act_fn(self.enc(self.features(obs)))
        if first is not None:
            state = state * (~first).unsqueeze(1).to(state.dtype)
        state = self._cell(x, state)
        h = state[:, :self.size]
        return self.pi(h), self.v(h).squeeze(-1), state

    def unroll(self, obs: Any, state: torch.Tensor, first: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """L steps of B sequences, batch first: obs [B, L, ...] (or {column: [B, L,
        ...]}), state [B, S] before the first step, first [B, L]. Returns head outputs
        [B, L, n], values [B, L] and the state after the last step."""
        B, L = first.shape
        flat = ({k: v.reshape(B * L, *v.shape[2:]) for k, v in obs.items()}
                if isinstance(obs, dict) else obs.reshape(B * L, *obs.shape[2:]))
        x = self.act_fn(self.enc(self.features(flat))).reshape(B, L, -1)
        keep = (~first).to(state.dtype)
        hs = []
        for t in range(L):  # the cell step by step: episodes start inside a sequence
            state = self._cell(x[:, t], state * keep[:, t].unsqueeze(1))
            hs.append(state[:, :self.size])
        h = torch.stack(hs, dim=1)
        return self.pi(h), self.v(h).squeeze(-1), state

    def dist(self, obs: Any, seq: torch.Tensor | None = None, acting: bool = False
             ) -> Distribution:
        raise TypeError("a recurrent policy acts with step() and learns with unroll()")

    def value(self, obs: Any, seq: torch.Tensor | None = None, acting: bool = False
              ) -> torch.Tensor:
        raise TypeError("a recurrent policy acts with step() and learns with unroll()")
