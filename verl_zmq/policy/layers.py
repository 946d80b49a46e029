"""Layers the networks share: the orthogonally initialised MLP."""

from __future__ import annotations

import numpy as np
from torch import nn

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}


def mlp(n_in: int, hidden: list[int], n_out: int, activation: str,
        out_gain: float = 1.0) -> nn.Sequential:
    """An MLP with orthogonal init (gain sqrt(2) inside, `out_gain` on the last layer)."""
    layers: list[nn.Module] = []
    last = n_in
    for h in hidden:
        lin = nn.Linear(last, h)
        nn.init.orthogonal_(lin.weight, np.sqrt(2))
        nn.init.zeros_(lin.bias)
        layers += [lin, ACTIVATIONS[activation]()]
        last = h
    out = nn.Linear(last, n_out)
    nn.init.orthogonal_(out.weight, out_gain)
    nn.init.zeros_(out.bias)
    layers.append(out)
    return nn.Sequential(*layers)
