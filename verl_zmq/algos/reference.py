"""The KL to a frozen reference policy, as post-training uses it (verl's
`kl_penalty`): estimated per token from log-probabilities of the sampled token
by an estimator registered in `core.py` (k1, k3)."""

from __future__ import annotations

import torch

from .core import KL_ESTIMATORS, lookup


def kl_estimate(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) from log pi(a) and log pi_ref(a), a ~ pi,
    by the estimator registered as `estimator`."""
    return lookup(KL_ESTIMATORS, estimator, "algorithm.params.kl_estimator")(logp, ref_logp)
