"""How a member of the PPO family composes its update."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Recipe:
    """How a member of the PPO family composes its update from `core.py`'s
    registered functions: which advantage estimator (None: "gae", or "vtrace"
    with `params.vtrace`), whether it has a critic, whether its clip is the
    decoupled [1 - clip_low, 1 + clip_high] or the scheduled `clip_range`, and
    whether it learns from whole responses (sequence tasks: only responses that
    ended in the batch and were scored, minibatches of whole responses)."""

    advantage: str | None = None
    critic: bool = True
    decoupled_clip: bool = False
    whole_responses: bool = False
    policy_loss: str = "clipped"
