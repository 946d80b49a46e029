"""The KL to a frozen reference policy, as post-training uses it (verl's
`kl_penalty`): estimated per token from log-probabilities of the sampled token
by an estimator registered in `core.py` (k1, k2, k3, abs)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from ..policy.encoders import obs_apply
from .core import KL_ESTIMATORS, lookup


def kl_estimate(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) from log pi(a) and log pi_ref(a), a ~ pi,
    by the estimator registered as `estimator`."""
    return lookup(KL_ESTIMATORS, estimator, "algorithm.params.kl_estimator")(logp, ref_logp)


def reference_logp(ref: Any, batch: Mapping[str, np.ndarray], flat_obs: Any, seq: np.ndarray,
                   device: torch.device) -> np.ndarray:
    """The reference policy's log pi_ref(a_t|x_t) on a batch, [T, N] (0 where not
    valid); `flat_obs` the batch's observations as [T * N, ...] tensors, `seq` each
    step's episode (a sequence model takes one pass per response)."""
    T, N = batch["reward"].shape
    mask = np.asarray(batch["valid"], bool).reshape(-1)
    out = np.zeros(T * N, np.float32)
    if mask.any():
        act = np.asarray(batch["action"]).reshape(T * N, *np.shape(batch["action"])[2:])
        with torch.no_grad():
            keep = torch.as_tensor(mask, device=device)
            o = obs_apply(flat_obs, lambda x: x[keep])
            a = torch.as_tensor(act[mask], device=device)
            s = torch.as_tensor(seq.reshape(-1)[mask], device=device)
            out[mask] = ref.log_prob(ref.dist(o, s), a).cpu().numpy()
    return out.reshape(T, N)
