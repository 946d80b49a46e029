"""The pieces of a policy-gradient update that every learner of the family
assembles the same way: PPO (`ppo.py`, and DAPO's and GRPO's recipes of it) on
its own networks, and GRPO on a Hugging Face model (`seq/hf_grpo.py`) on
whole responses. One path: the KL to a frozen reference as a reward penalty or a
loss term, the clip statistics, the value loss, and the optimiser step."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from ..policy.value_norm import ValueNorm
from .base import clip_grad_norm, step_if_finite
from .core import KLController


def kl_to_reference(batch: Mapping[str, np.ndarray], ref_logp: np.ndarray,
                    valid: np.ndarray, kl: KLController, kl_in: str
                    ) -> tuple[dict[str, np.ndarray], float]:
    """The batch with, where `kl_in = "reward"`, each token's reward less the KL
    coefficient x log(pi_behaviour / pi_ref) (k1); and the batch's mean k1 over its
    valid tokens (what the adaptive coefficient follows, `charts/kl_ref`)."""
    k1 = np.where(valid, np.asarray(batch["logp"]) - ref_logp, 0.0).astype(np.float32)
    mean = float(k1.sum() / max(1, valid.sum()))
    out = dict(batch)
    if kl_in == "reward":
        out["reward"] = np.asarray(batch["reward"]) - kl.value * k1
    return out, mean


def kl_loss(kl_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
            aggregate: Callable[..., torch.Tensor], kl: KLController, new_logp: torch.Tensor,
            ref_logp: torch.Tensor, mb: Mapping[str, torch.Tensor], horizon: float,
            stats: dict[str, Any]) -> torch.Tensor:
    """The KL to the reference as a loss term: the coefficient x the estimator's KL,
    aggregated as the policy loss is (`losses/kl_ref`, verl's `actor/kl_loss`)."""
    term = aggregate(kl_fn(new_logp, ref_logp), mb, horizon)
    stats["losses/kl_ref"] = stats["actor/kl_loss"] = term.detach()
    out: torch.Tensor = kl.value * term
    return out


def clip_stats(new_logp: torch.Tensor, old_logp: torch.Tensor, ratio: torch.Tensor,
               low: float, high: float, verl_names: bool) -> dict[str, torch.Tensor]:
    """How far the update moved from the behaviour policy: the share of clipped
    ratios and the approximate KL ((r - 1) - log r); with `verl_names`, verl's
    `actor/pg_clipfrac` and `actor/ppo_kl` beside them (post-training)."""
    with torch.no_grad():
        log_ratio = new_logp - old_logp
        clipped = ((ratio < 1 - low) | (ratio > 1 + high)).float().mean()
        out = {"losses/approx_kl": ((ratio - 1) - log_ratio).mean(),
               "losses/clip_fraction": clipped}
        if verl_names:
            out |= {"actor/pg_clipfrac": clipped, "actor/ppo_kl": -log_ratio.mean()}
    return out


def value_loss(v: torch.Tensor, ret: torch.Tensor, old: torch.Tensor, clip: float,
               norm: ValueNorm | None) -> torch.Tensor:
    """Half the mean squared error of the values against their targets, clipped
    around the recorded values where `clip` > 0; with value normalisation `v` is
    the critic's scaled output and the targets (and the clip) are scaled alike."""
    if norm is not None:
        ret, old = norm.normalize(ret), norm.normalize(old)
    err = (v - ret) ** 2
    if clip > 0:
        err = torch.max(err, (old + (v - old).clamp(-clip, clip) - ret) ** 2)
    return 0.5 * err.mean()


def optimiser_step(opt: Any, loss: torch.Tensor, params: Sequence[torch.Tensor],
                   max_grad_norm: float,
                   between: Callable[[], None] | None = None) -> torch.Tensor:
    """Backward, clip the global gradient norm, step; `between` runs after the
    backward pass (a gossip peer averages gradients there). The norm before clipping
    (not finite: the step was skipped)."""
    opt.zero_grad(set_to_none=True)
    loss.backward()  # type: ignore[no-untyped-call]
    if between is not None:
        between()
    norm = clip_grad_norm(params, max_grad_norm)
    step_if_finite(opt, norm)
    return norm


def proximal_logp(data: Mapping[str, torch.Tensor],
                  logp: Callable[[Mapping[str, torch.Tensor]], torch.Tensor],
                  parts: list[torch.Tensor]) -> torch.Tensor:
    """log pi(a|s) of every step of `data` under the policy as an update starts,
    without gradients, a pass per index set of `parts` (which cover every step): the
    proximal policy of the decoupled objective (Fu et al. 2025, AReaL)."""
    out = torch.empty_like(data["logp"])
    with torch.no_grad():
        for idx in parts:
            out[idx] = logp({k: v[idx] for k, v in data.items()}).float()
    return out


def behaviour_weighted(per_step: torch.Tensor, prox_logp: torch.Tensor,
                       behav_logp: torch.Tensor, cap: float,
                       stats: dict[str, Any]) -> torch.Tensor:
    """The decoupled objective's per-step loss: the loss clipped around the proximal
    policy, weighted by pi_prox / pi_behav (the sampler's policy, however stale),
    capped at `cap` where it is > 0."""
    w = (prox_logp - behav_logp).clamp(-20.0, 20.0).exp()
    if cap > 0:
        w = w.clamp(max=cap)
    stats["actor/behav_imp_weight"] = w.mean().detach()
    return per_step * w
