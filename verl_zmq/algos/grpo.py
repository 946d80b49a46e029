"""GRPO (Shao et al. 2024, DeepSeekMath) as verl runs it, at toy scale.

No critic: a sampler's sequence env answers each prompt `group_size` times
(`seq/env.py`, lock-step rounds, so a fragment holds whole groups), and each
response's advantage is its score against its group's: `(r - mean) / std`, or
`r - mean` without the std (Dr. GRPO), for every token of the response (the
"grpo" advantage estimator of `core.py`). The policy loss is PPO's clipped
surrogate with the decoupled clip, aggregated by `loss_agg` ("token-mean", or
"seq-mean-token-sum": summed per response, averaged over responses);
minibatches hold whole responses. The KL to the frozen reference (`kl_coef`,
`kl_estimator`) is a loss term or a per-token reward penalty (`kl_in`).
"""

from __future__ import annotations

from .core import group_advantages, seq_mean_token_sum
from .ppo import PPO, Recipe

__all__ = ["GRPO", "group_advantages", "seq_mean_token_sum"]


class GRPO(PPO):
    """Group-relative policy optimisation on sequence tasks (see the module)."""

    name = "grpo"
    recipe = Recipe(advantage="grpo", critic=False, decoupled_clip=True, whole_responses=True)


ALGORITHM = GRPO
