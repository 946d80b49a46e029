"""The KL to a frozen reference policy, as post-training uses it (verl's
`kl_penalty`): estimated per token from log-probabilities of the sampled token."""

from __future__ import annotations

import torch


def kl_estimate(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) from log pi(a) and log pi_ref(a), a ~ pi.

    k1 = log pi(a) - log pi_ref(a): unbiased, may be negative, high variance.
    k3 = r - log r - 1 with r = pi_ref(a) / pi(a): unbiased, never negative, low
    variance (Schulman, "Approximating KL divergence", 2020)."""
    if estimator == "k1":
        return logp - ref_logp
    if estimator == "k3":
        d = (ref_logp - logp).clamp(-20.0, 20.0)  # exp of a huge ratio would overflow
        return d.exp() - d - 1.0
    raise ValueError(f"algorithm.params.kl_estimator: {estimator!r}: expected k1 or k3")
