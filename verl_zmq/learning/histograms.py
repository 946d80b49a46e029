"""What a learner sends for TensorBoard's histograms every
`logging.histograms_interval` updates (0: never): the batch's actions, the
update's advantages (PPO, DAPO) and the policy's weights, as bucket counts,
with each weight array's norm. The launcher writes them to `tb/` beside the
scalars. Computing them costs a pass over the batch and the weights (measured
in docs/guides/monitoring.md); the event is a few kilobytes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

BINS = 30
MAX_VALUES = 1 << 20  # weights beyond this many are sampled for the histogram


def histogram(x: np.ndarray | torch.Tensor, bins: int = BINS) -> dict[str, Any] | None:
    """TensorBoard's histogram fields for the finite values of `x`; None if none."""
    v = (x.detach().float().cpu().numpy() if isinstance(x, torch.Tensor)
         else np.asarray(x)).astype(np.float64).ravel()
    v = v[np.isfinite(v)]
    if not v.size:
        return None
    counts, edges = np.histogram(v, bins=bins)
    return {"min": float(v.min()), "max": float(v.max()), "num": int(v.size),
            "sum": float(v.sum()), "sum_squares": float((v * v).sum()),
            "limits": edges[1:].tolist(), "counts": counts.tolist()}


def snapshot(batch: Mapping[str, np.ndarray], samples: Mapping[str, Any],
             module: torch.nn.Module, seed: int = 0) -> dict[str, Any]:
    """`hist` (name -> histogram) and `norms` (weight array -> its L2 norm)."""
    hist: dict[str, Any] = {}
    action = batch.get("action")
    if action is not None:
        valid = batch.get("valid")
        a = np.asarray(action)
        if valid is not None and np.shape(valid) == a.shape[:np.ndim(valid)]:
            a = a[np.asarray(valid, bool)]
        hist["actions"] = histogram(a)
    if (adv := samples.get("advantages")) is not None:
        hist["advantages"] = histogram(adv)
    norms: dict[str, float] = {}
    with torch.no_grad():
        flat = []
        for name, p in module.named_parameters():
            norms[name] = float(p.detach().float().norm())
            flat.append(p.detach().float().reshape(-1).cpu())
        if flat:
            w = torch.cat(flat)
            if w.numel() > MAX_VALUES:
                g = torch.Generator().manual_seed(seed)
                w = w[torch.randint(0, w.numel(), (MAX_VALUES,), generator=g)]
            hist["weights"] = histogram(w)
    return {"hist": {k: v for k, v in hist.items() if v is not None}, "norms": norms}
