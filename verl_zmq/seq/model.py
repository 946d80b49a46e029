"""A small causal transformer policy over token observations, in plain torch.

Observations are token buffers padded with 0 at the end (`seq/env.py`); the
policy reads the position of the last token. Actions are the tokens from
`FIRST_ACTION_TOKEN` up, so the vocabulary is the action count plus the tokens
below it. Acting uses a key/value cache (`decode.py`): at a sampler's batch of
64 buffers it generates a response 2.5 times faster than recomputing the whole
prefix each step (`tools/bench/decode.py`); learning takes one pass per response.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ..config import Policy
from ..envs.spec import EnvSpec
from ..policy.net import PolicyNet
from .decode import PrefixCache
from .tasks import FIRST_ACTION_TOKEN, PAD, SEP


class CausalTransformer(nn.Module):
    """Token and learned position embeddings, pre-norm causal self-attention
    blocks, a final layer norm: [B, L] tokens -> [B, L, d] features.

    Positions count from the prompt's separator (negative in the prompt, 0 at the
    separator, positive in the response), not from the buffer's start: the i-th
    response token then sits at the same position whatever the prompt's length,
    so what it must attend to (the i-th digit from the prompt's end, in
    reversal) is one pattern to learn instead of one per prompt length."""

    def __init__(self, vocab: int, length: int, d: int, layers: int, heads: int):
        super().__init__()
        self.length = length
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(2 * length, d)
        nn.init.normal_(self.tok.weight, std=0.02)
        nn.init.normal_(self.pos.weight, std=0.02)
        block = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(length),
                             persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        L = tokens.shape[1]
        sep = (tokens == SEP).int().argmax(1, keepdim=True)  # 0 where there is none
        pos = torch.arange(L, device=tokens.device) - sep + self.length
        x = self.tok(tokens) + self.pos(pos)
        return self.norm(self.blocks(x, mask=self.mask[:L, :L], is_causal=True))


def _head(d: int, n: int, gain: float) -> nn.Linear:
    lin = nn.Linear(d, n)
    nn.init.orthogonal_(lin.weight, gain)
    nn.init.zeros_(lin.bias)
    return lin


class TokenActorCritic(PolicyNet):
    """The `ActorCritic` interface (dist, value, log_prob, entropy, mode) on a causal
    transformer: a categorical policy head and a value head read the features at
    each buffer's last token; the value head has its own trunk unless
    `shared_trunk`."""

    discrete = True

    def __init__(self, spec: EnvSpec, policy: Policy):
        super().__init__()
        if not spec.discrete or len(spec.obs_shape) != 1:
            raise ValueError("algorithm.policy.kind: a transformer policy needs token "
                             "observations (a 1-d buffer) and Discrete actions")
        vocab = spec.n_actions + FIRST_ACTION_TOKEN
        L, d = spec.obs_shape[0], policy.d_model

        def trunk():
            return CausalTransformer(vocab, L, d, policy.n_layers, policy.n_heads)

        self.trunk = trunk()
        self.v_trunk = None if policy.shared_trunk else trunk()
        self.pi = _head(d, spec.n_actions, 0.01)
        self.v = _head(d, 1, 1.0)
        self._memo: tuple = (None, None, None, None)
        self._acting = (PrefixCache(), PrefixCache())  # policy trunk, value trunk

    @staticmethod
    def _last(tokens: torch.Tensor) -> torch.Tensor:
        return ((tokens != PAD).sum(1) - 1).clamp(min=0)

    def _features(self, obs: torch.Tensor, value: bool,
                  seq: torch.Tensor | None = None, acting: bool = False) -> torch.Tensor:
        """Features at each buffer's last token. `seq` (optional) names the response
        each buffer belongs to: the buffers of one response are prefixes of its
        longest, so one pass over that one gives them all (causal attention), about
        a response's length fewer tokens. The policy's features are kept for the
        value head's call on the same tensor (a PPO loss asks for both). `acting`
        (a sampler's or the evaluator's step, no gradient): only each buffer's
        new token takes a pass, with a key/value cache (`decode.py`)."""
        shared = not value or self.v_trunk is None
        if acting and seq is None and not torch.is_grad_enabled():
            net = self.trunk if shared else self.v_trunk
            return self._acting[0 if shared else 1].features(net, obs.flatten(1).long())
        # the same tensors, unchanged since (in-place writes bump _version), same grad mode
        key = (obs, seq, (obs._version, torch.is_grad_enabled()))
        if shared and self._memo[0] is obs and self._memo[1] is seq and \
                self._memo[2] == key[2]:
            return self._memo[3]
        tokens = obs.flatten(1).long()
        last = self._last(tokens)
        net = self.trunk if shared else self.v_trunk
        if seq is None:
            h = net(tokens)[torch.arange(tokens.shape[0], device=tokens.device), last]
        else:
            _, inv = torch.unique(seq, return_inverse=True)
            longest = torch.full((int(inv.max()) + 1 if len(inv) else 0,), -1,
                                 dtype=last.dtype, device=last.device)
            longest = longest.scatter_reduce(0, inv, last, "amax")
            final = last == longest[inv]
            row = torch.zeros_like(longest).scatter_(
                0, inv[final], torch.nonzero(final).squeeze(1))
            h = net(tokens[row])[inv, last]
        if shared:
            self._memo = (*key, h)
        return h

    def logits_all(self, tokens: torch.Tensor) -> torch.Tensor:
        """Policy logits at every position: [B, L, actions]."""
        return self.pi(self.trunk(tokens.long()))

    def dist(self, obs: torch.Tensor, seq: torch.Tensor | None = None, acting: bool = False
             ) -> torch.distributions.Categorical:
        return torch.distributions.Categorical(
            logits=self.pi(self._features(obs, False, seq, acting)), validate_args=False)

    def value(self, obs: torch.Tensor, seq: torch.Tensor | None = None,
              acting: bool = False) -> torch.Tensor:
        return self.v(self._features(obs, True, seq, acting)).squeeze(-1)



def token_obs(tokens: list[list[int]], length: int) -> np.ndarray:
    """Token lists as padded float32 buffers, the env's observation format."""
    out = np.full((len(tokens), length), PAD, np.float32)
    for i, t in enumerate(tokens):
        out[i, :len(t)] = t
    return out
