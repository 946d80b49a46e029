"""Acting with a key/value cache: a sampler's envs each grow their buffer by one
token per step, so only the new position needs a pass; every layer's keys and
values of the earlier positions are kept from the steps before.

`PrefixCache` keeps them per row of the acting batch and decides row by row:
a buffer that grew by one token over the last call's takes one position, a
buffer unchanged (a finished response waiting for its group) keeps its
features, anything else (a new prompt, another batch) takes a whole-prefix pass
that fills the cache again. The layers are run by hand with the weights of
`nn.TransformerEncoderLayer` (pre-norm), so the features equal the module's own
(`tests/test_posttrain.py`); `tools/bench/decode.py` measures both ways.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .tasks import PAD, SEP


def layer_pass(layer, x: torch.Tensor, k_all: torch.Tensor, v_all: torch.Tensor,
               at: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """One pre-norm encoder layer on new positions `x` [B, n, d] at indices `at`
    [B, n]: their keys and values are written into the cache [B, H, L, dh] and
    their queries attend to the cache under `mask` [B, 1, n, L] (True: may attend);
    None: the n positions are the whole prefix from 0, causally."""
    attn = layer.self_attn
    B, n, d = x.shape
    H = attn.num_heads
    q, k, v = F.linear(layer.norm1(x), attn.in_proj_weight, attn.in_proj_bias).chunk(3, -1)
    q, k, v = (t.view(B, n, H, d // H).transpose(1, 2) for t in (q, k, v))
    rows = torch.arange(B, device=x.device)[:, None]
    k_all[rows, :, at] = k.transpose(1, 2)
    v_all[rows, :, at] = v.transpose(1, 2)
    if mask is None:
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:
        a = F.scaled_dot_product_attention(q, k_all, v_all, attn_mask=mask)
    x = x + attn.out_proj(a.transpose(1, 2).reshape(B, n, d))
    return x + layer.linear2(layer.activation(layer.linear1(layer.norm2(x))))


class PrefixCache:
    """Keys and values of every layer of one trunk for the rows of the last acting
    batch, and each row's features at its last token."""

    def __init__(self) -> None:
        self.tokens: torch.Tensor | None = None
        self.kv: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.h: torch.Tensor | None = None

    def features(self, trunk, tokens: torch.Tensor) -> torch.Tensor:
        """Features [B, d] at each row's last token of `tokens` [B, L]."""
        B, L = tokens.shape
        n = (tokens != PAD).sum(1)
        old = self.tokens
        if old is None or old.shape != tokens.shape:
            self._reset(trunk, tokens)
            fresh = torch.ones(B, dtype=torch.bool, device=tokens.device)
            grown = ~fresh
        else:
            n_old = (old != PAD).sum(1)
            differs = tokens != old
            new_at = torch.arange(L, device=tokens.device)[None] == n_old[:, None]
            grown = (n == n_old + 1) & ~(differs & ~new_at).any(1)
            fresh = differs.any(1) & ~grown
        if fresh.any():
            self._prefix(trunk, tokens, fresh.nonzero().squeeze(1), n)
        if grown.any():
            self._step(trunk, tokens, grown.nonzero().squeeze(1), n)
        self.tokens = tokens.clone()
        return self.h

    def _reset(self, trunk, tokens: torch.Tensor) -> None:
        B, L = tokens.shape
        layer = trunk.blocks.layers[0]
        H, d = layer.self_attn.num_heads, layer.self_attn.embed_dim
        self.kv = [(tokens.new_zeros((B, H, L, d // H), dtype=torch.float32),
                    tokens.new_zeros((B, H, L, d // H), dtype=torch.float32))
                   for _ in trunk.blocks.layers]
        self.h = tokens.new_zeros((B, d), dtype=torch.float32)

    @staticmethod
    def _positions(trunk, tokens: torch.Tensor, at: torch.Tensor) -> torch.Tensor:
        sep = (tokens == SEP).int().argmax(1, keepdim=True)
        return at - sep + trunk.length

    def _prefix(self, trunk, tokens, rows, n) -> None:
        t = tokens[rows]
        L = t.shape[1]
        at = torch.arange(L, device=t.device).expand(len(rows), L)
        x = trunk.tok(t) + trunk.pos(self._positions(trunk, t, at))
        for layer, (k, v) in zip(trunk.blocks.layers, self.kv, strict=True):
            kr, vr = k[rows], v[rows]
            x = layer_pass(layer, x, kr, vr, at, None)
            k[rows], v[rows] = kr, vr
        self.h[rows] = trunk.norm(x)[torch.arange(len(rows)), (n[rows] - 1).clamp(min=0)]

    def _step(self, trunk, tokens, rows, n) -> None:
        t = tokens[rows]
        at = (n[rows] - 1)[:, None]  # the one new position of each row
        x = trunk.tok(t.gather(1, at)) + trunk.pos(self._positions(trunk, t, at))
        L = t.shape[1]
        mask = (torch.arange(L, device=t.device)[None] <= at)[:, None, None, :]
        for layer, (k, v) in zip(trunk.blocks.layers, self.kv, strict=True):
            kr, vr = k[rows], v[rows]
            x = layer_pass(layer, x, kr, vr, at, mask)
            k[rows], v[rows] = kr, vr
        self.h[rows] = trunk.norm(x)[:, 0]
