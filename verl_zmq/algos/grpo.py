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

verl's options are params naming `core.py` entries: `adv_estimator` (grpo, rloo,
reinforce_plus_plus, reinforce_plus_plus_baseline), `loss_agg` (verl's four
`loss_agg_mode`s), `clip_ratio_c` (dual clip), `kl_estimator` (k1, k2, k3, abs),
`kl_ctrl` (fixed or adaptive), and from verl's DAPO recipe `filter_groups` (groups
whose scores are all equal are marked out of a fragment, and the learner draws
more fragments until its batch is full) and the overlong penalty
(`overlong_buffer_len`, `overlong_penalty_factor`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..batch import episodes, steps
from ..config import GRPOParams
from .base import FragmentFilter
from .core import AdvantageInput, seq_mean_token_sum
from .grouped import group_advantages, group_signal, responses
from .ppo import PPO, Recipe

__all__ = ["GRPO", "group_advantages", "keep_groups", "seq_mean_token_sum"]


class GRPO(PPO[GRPOParams]):
    """Group-relative policy optimisation on sequence tasks (see the module)."""

    name = "grpo"
    recipe = Recipe(advantage="grpo", critic=False, decoupled_clip=True, whole_responses=True)

    def fragment_filter(self) -> FragmentFilter | None:
        """verl's `filter_groups`: see `keep_groups`."""
        return self.keep_groups if self.params.filter_groups else None

    def keep_groups(self, frag: Mapping[str, np.ndarray]
                    ) -> tuple[Mapping[str, np.ndarray], int] | None:
        """verl's `filter_groups` on one fragment (see `keep_groups`)."""
        return keep_groups(frag, self.params, self.group_size, self.max_response,
                           self.filter_stats)


def keep_groups(frag: Mapping[str, np.ndarray], params: Any, group_size: int,
                max_response: int, stats: dict[str, float]
                ) -> tuple[Mapping[str, np.ndarray], int] | None:
    """A fragment with its groups that carry no signal (scores all equal, the overlong
    penalty included) marked out: each of their responses ends truncated, which
    GRPO leaves out as it leaves out a dropped response; None when no group is
    left. The steps that count are the fragment's share of kept responses; the
    groups filtered are counted in `stats`."""
    term = np.asarray(frag["terminated"], bool)
    trunc = np.asarray(frag["truncated"], bool)
    valid = np.asarray(frag["valid"], bool)
    ordinal, how = episodes(term, trunc, valid)
    r = responses(AdvantageInput(frag, params, _unused, ordinal, how, group_size,
                                 max_response))
    signal = np.repeat(group_signal(r.scores, r.counted, group_size), group_size, axis=0)
    drop = r.counted & ~signal
    n_drop = int(drop.sum()) // group_size
    stats["grpo/filtered_groups"] = stats.get("grpo/filtered_groups", 0.0) + n_drop
    if not drop.any():
        return frag, steps(frag)
    kept = int((r.counted & signal).sum())
    if not kept:
        return None
    mark = (term | trunc) & valid & drop[r.cols, ordinal]
    out = {**frag, "terminated": term & ~mark, "truncated": trunc | mark}
    return out, round(steps(frag) * kept / max(int(r.counted.sum()), 1))


def _unused() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    raise AssertionError("scoring responses needs no forward pass")


ALGORITHM = GRPO
