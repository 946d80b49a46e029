"""What a function of one's own must take where a job names one by import path
(`module:function`), per kind of registered building block (`core.lookup`):
torch-free, so the launcher checks a job's plug-ins before anything starts."""

from __future__ import annotations

# what a function of one's own must take, per table (`lookup`)
SHAPES: dict[str, tuple[int, str]] = {
    "advantage estimator": (1, "(x: AdvantageInput) -> Advantages"),
    "policy loss": (6, "(new_logp, old_logp, adv, clip_low, clip_high, clip_ratio_c) -> "
                       "(per-step loss [B], ratio [B])"),
    "loss aggregation": (3, "(per-step loss [B], minibatch, horizon) -> loss"),
    "KL estimator": (2, "(logp, ref_logp) -> per-step KL [B]"),
}
