"""The policy-gradient family's building blocks, pure functions registered by
name as verl's `core_algos` registers them: advantage estimators, policy
losses, loss aggregations and KL estimators. PPO, DAPO and GRPO (`ppo.py`,
`dapo.py`, `grpo.py`) compose them by name from the job; a new variant is a
function here (or in `grouped.py`, the critic-free estimators of post-training,
which `ppo.py` imports so they register), not a subclass.

Shapes: fragments arrive as [T, N] columns (T steps of N env columns, in the
NEXT_STEP autoreset layout of `batch.py`); a minibatch is flat: [B] valid steps,
with `seq` (each step's episode: one response of a sequence task) and `column`
(each step's env column within the batch) beside them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import torch

from ..batch import bootstrap
from ..config import PPOParams
from ..importing import plug_in
from .shapes import SHAPES
from .vtrace import vtrace

Tensor = torch.Tensor
F = TypeVar("F", bound=Callable[..., Any])


def _registrar(table: dict[str, F], kind: str) -> Callable[..., Callable[[F], F]]:
    KINDS[id(table)] = kind

    def register(*names: str) -> Callable[[F], F]:
        def put(fn: F) -> F:
            for name in names:
                if name in table:
                    raise KeyError(f"{kind} {name!r} is registered twice")
                table[name] = fn
            return fn
        return put
    return register


KINDS: dict[int, str] = {}  # id(table) -> its kind, as `_registrar` names it


def lookup(table: dict[str, F], name: str, key: str) -> F:
    """The function registered as `name`; a "module:function" of one's own is
    imported, checked for what it takes, and registered the same way. A ValueError
    naming the job key and the registered names otherwise."""
    if name in table:
        return table[name]
    kind = KINDS.get(id(table), "")
    if ":" in name and kind in SHAPES:
        takes, shape = SHAPES[kind]
        fn: F = plug_in(name, key, takes, shape)  # type: ignore[assignment]
        table[name] = fn
        return fn
    raise ValueError(f"{key}: {name!r}: expected one of {', '.join(sorted(table))}, or a "
                     f"\"module:function\" of your own")


# -- advantage estimators: [T, N] columns -> per-step advantages, returns, values


@dataclass(frozen=True)
class AdvantageInput:
    """What an advantage estimator may read: the batch's [T, N] columns, the job's
    params, the current network's (log pi, V, V(bootstrap)) on the batch computed
    on demand, and each step's response (`ordinal`, [T, N]) and how each response
    ended (`how`, [N, K]: 1 ended in the batch, 2 dropped), for grouped tasks."""

    batch: Mapping[str, np.ndarray]
    params: PPOParams  # the policy-gradient family's (DAPO's and GRPO's derive from it)
    now: Callable[[], tuple[np.ndarray, np.ndarray, np.ndarray]]
    ordinal: np.ndarray
    how: np.ndarray
    group_size: int = 1
    max_response: int = 0  # a sequence task's longest response (the overlong penalty's)


@dataclass
class Advantages:
    """Per-step advantages and returns [T, N], the values a clipped value loss is
    clipped around, and what the estimator reports (metrics)."""

    adv: np.ndarray
    ret: np.ndarray
    value: np.ndarray
    stats: dict[str, float] = field(default_factory=dict)


AdvantageEstimator = Callable[[AdvantageInput], Advantages]
ADVANTAGE_ESTIMATORS: dict[str, AdvantageEstimator] = {}
register_advantage = _registrar(ADVANTAGE_ESTIMATORS, "advantage estimator")


def compute_gae(reward: np.ndarray, value: np.ndarray, terminated: np.ndarray,
                truncated: np.ndarray, valid: np.ndarray, bootstrap_value: np.ndarray,
                gamma: float, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """GAE over [T, E] columns in NEXT_STEP autoreset layout.

    The step after a done step is invalid (the env only reset); its recorded
    value is V(final observation). So a truncated step bootstraps from it and a
    terminated step does not; an invalid step gets zero advantage and cuts the
    recursion. Returns (advantages, returns), both [T, E] float32.
    """
    T = reward.shape[0]
    adv = np.zeros_like(reward, dtype=np.float32)
    last = np.zeros(reward.shape[1], np.float32)
    for t in reversed(range(T)):
        next_value = value[t + 1] if t + 1 < T else bootstrap_value
        nonterminal = 1.0 - terminated[t].astype(np.float32)
        cont = nonterminal * (1.0 - truncated[t].astype(np.float32))
        delta = reward[t] + gamma * next_value * nonterminal - value[t]
        last = delta + gamma * lam * cont * last
        last = np.where(valid[t], last, 0.0).astype(np.float32)
        adv[t] = last
    return adv, (adv + value).astype(np.float32)


@register_advantage("gae")
def gae_advantages(x: AdvantageInput) -> Advantages:
    """GAE from the values samplers recorded (Schulman et al. 2016)."""
    b, p = x.batch, x.params
    adv, ret = compute_gae(b["reward"], b["value"], b["terminated"], b["truncated"],
                           b["valid"], b[bootstrap("value")], p.gamma, p.gae_lambda)
    return Advantages(adv, ret, b["value"])


@register_advantage("vtrace")
def vtrace_advantages(x: AdvantageInput) -> Advantages:
    """V-trace (Espeholt et al. 2018) from the current network's log-probabilities
    and values: stale fragments are corrected, not dropped."""
    b, p = x.batch, x.params
    logp, value, boot = x.now()
    adv, ret = vtrace(b["reward"], value, b["terminated"], b["truncated"], b["valid"], boot,
                      logp - b["logp"], p.gamma, p.gae_lambda, p.vtrace_rho_bar,
                      p.vtrace_c_bar)
    return Advantages(adv, ret, value)


# -- a critic's fit to its value targets (charted, and read by the health checks)

def critic_fit(y: Tensor, pred: Tensor) -> dict[str, float]:
    """How a critic's predictions fit their value targets: explained variance; the
    predictions' spread against the targets' (about 0 when it answers one
    constant); the targets' own spread against their size (near 0 once every
    episode ends alike, a solved task, when explained variance says nothing); and
    their size."""
    var = float(y.var()) if y.numel() > 1 else 0.0
    scale = float(y.abs().mean())
    return {"losses/explained_variance": 1 - float((y - pred).var()) / var if var > 0 else 0.0,
            "losses/value_spread": float(pred.std()) / var ** 0.5 if var > 0 else 1.0,
            "losses/value_target_spread": var ** 0.5 / max(scale, 1e-8),
            "losses/value_target_scale": scale}


# -- policy losses: per-step loss [B] and the ratio [B]

PolicyLoss = Callable[[Tensor, Tensor, Tensor, float, float, float], tuple[Tensor, Tensor]]
POLICY_LOSSES: dict[str, PolicyLoss] = {}
register_policy_loss = _registrar(POLICY_LOSSES, "policy loss")


@register_policy_loss("clipped")
def clipped_surrogate(new_logp: Tensor, old_logp: Tensor, adv: Tensor,
                      clip_low: float, clip_high: float, clip_c: float = 0.0
                      ) -> tuple[Tensor, Tensor]:
    """Per-step PPO policy loss with the ratio clipped to [1 - low, 1 + high]; and the
    ratio. With `clip_c` > 1, dual-clip PPO (Ye et al. 2020) as verl's
    `clip_ratio_c`: a negative advantage's loss is bounded by -clip_c x A, so a
    ratio far above 1 on a bad action cannot make the loss unbounded."""
    # a huge log-ratio (a sequence model far off its behaviour) would overflow exp
    ratio = (new_logp - old_logp).clamp(-20.0, 20.0).exp()
    loss = torch.max(-adv * ratio, -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high))
    if clip_c > 1.0:
        loss = torch.where(adv < 0, torch.min(loss, -adv * clip_c), loss)
    return loss, ratio


# -- loss aggregations: per-step values [B] of a minibatch -> one scalar. `horizon`
# is the constant divisor of "seq-mean-token-sum-norm" (the others ignore it)

Aggregation = Callable[[Tensor, Mapping[str, Tensor], float], Tensor]
AGGREGATIONS: dict[str, Aggregation] = {}
register_aggregation = _registrar(AGGREGATIONS, "loss aggregation")


@register_aggregation("token-mean", "step-mean")
def token_mean(per_step: Tensor, mb: Mapping[str, Tensor], horizon: float = 1.0) -> Tensor:
    """The mean over every step (token) of the minibatch."""
    return per_step.mean()


def _group_sums(per_step: Tensor, key: Tensor) -> tuple[Tensor, Tensor]:
    """Sums of `per_step` per distinct `key`, and the inverse index of each step."""
    ids, inv = torch.unique(key, return_inverse=True)
    sums = torch.zeros(len(ids), dtype=per_step.dtype, device=per_step.device)
    return sums.index_add_(0, inv, per_step), inv


def _group_means(per_step: Tensor, key: Tensor) -> Tensor:
    sums, inv = _group_sums(per_step, key)
    counts = torch.zeros_like(sums).index_add_(0, inv, torch.ones_like(per_step))
    return sums / counts


@register_aggregation("seq-mean-token-sum")
def seq_mean_token_sum(per_step: Tensor, mb: Mapping[str, Tensor],
                       horizon: float = 1.0) -> Tensor:
    """Sum over each response's (episode's) steps, mean over the responses."""
    return _group_sums(per_step, mb["seq"])[0].mean()


@register_aggregation("seq-mean-token-mean")
def seq_mean_token_mean(per_step: Tensor, mb: Mapping[str, Tensor],
                        horizon: float = 1.0) -> Tensor:
    """Mean over each response's steps, then over the responses: every response
    weighs the same whatever its length (the original GRPO's)."""
    return _group_means(per_step, mb["seq"]).mean()


@register_aggregation("seq-mean-token-sum-norm")
def seq_mean_token_sum_norm(per_step: Tensor, mb: Mapping[str, Tensor],
                            horizon: float = 1.0) -> Tensor:
    """Each response's token sum over a constant `horizon` (the longest response,
    or `loss_scale_factor`), mean over the responses: Dr. GRPO's (Liu et al. 2025)
    length-unbiased aggregation."""
    return _group_sums(per_step, mb["seq"])[0].mean() / max(horizon, 1.0)


@register_aggregation("fragment-mean")
def fragment_mean(per_step: Tensor, mb: Mapping[str, Tensor], horizon: float = 1.0) -> Tensor:
    """Mean over columns (one env's steps within one fragment) of each column's mean."""
    return _group_means(per_step, mb["column"]).mean()


# -- KL estimators: per-token KL(pi || pi_ref) from log pi(a) and log pi_ref(a), a ~ pi;
# verl's names beside Schulman's

KLEstimator = Callable[[Tensor, Tensor], Tensor]
KL_ESTIMATORS: dict[str, KLEstimator] = {}
register_kl = _registrar(KL_ESTIMATORS, "KL estimator")


@register_kl("k1", "kl")
def kl_k1(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """log pi(a) - log pi_ref(a): unbiased, may be negative, high variance."""
    return logp - ref_logp


@register_kl("abs")
def kl_abs(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """|log pi(a) - log pi_ref(a)|: never negative, biased."""
    return (logp - ref_logp).abs()


@register_kl("k2", "mse")
def kl_k2(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """(log pi(a) - log pi_ref(a))^2 / 2: never negative, low variance, biased."""
    return 0.5 * (logp - ref_logp).square()


@register_kl("k3", "low_var_kl")
def kl_k3(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """r - log r - 1 with r = pi_ref(a) / pi(a): unbiased, never negative, low
    variance (Schulman, "Approximating KL divergence", 2020); clamped to [-10, 10]
    as verl's low_var_kl is, so one token far off the reference cannot dominate."""
    d = (ref_logp - logp).clamp(-20.0, 20.0)  # exp of a huge ratio would overflow
    return (d.exp() - d - 1.0).clamp(-10.0, 10.0)


# -- KL coefficients: fixed, or adapted towards a target KL (Ziegler et al. 2019)


@dataclass
class KLController:
    """The KL term's coefficient: `kind` "fixed" keeps `value`; "adaptive" moves it
    after each update by 1 + clip(kl / target - 1, -0.2, 0.2) x n / horizon, n the
    responses (or steps) learned from, as verl's AdaptiveKLController."""

    value: float
    kind: str = "fixed"
    target: float = 0.1
    horizon: float = 10000.0

    def update(self, kl: float, n: int) -> None:
        if self.kind == "adaptive" and self.target > 0:
            err = float(np.clip(kl / self.target - 1.0, -0.2, 0.2))
            self.value *= 1.0 + err * n / self.horizon

