"""DAPO's local update: PPO with the decoupled clip (ratio clipped to
[1 - clip_low, 1 + clip_high]), the policy loss averaged over every step of
the batch ("step-mean") or per fragment column first ("fragment-mean"), and
dynamic sampling: fragments whose advantages are all within a tolerance of
zero carry no learning signal and can be dropped by the peer before an update.
Each is a job-file switch, so an ablation is one flag."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..batch import bootstrap, steps
from ..config import DAPOParams
from .base import FragmentFilter
from .core import compute_gae, fragment_mean
from .ppo import PPO, Recipe

__all__ = ["DAPO", "fragment_mean"]


class DAPO(PPO[DAPOParams]):
    """PPO with decoupled clip, selectable loss aggregation, dynamic sampling."""

    name = "dapo"
    recipe = Recipe(decoupled_clip=True)

    def fragment_filter(self) -> FragmentFilter | None:
        """Dynamic sampling: drop fragments that carry no learning signal."""
        if not self.params.dynamic_sampling:
            return None
        return lambda f: (f, steps(f)) if self.informative(f) else None

    def informative(self, frag: Mapping[str, np.ndarray]) -> bool:
        """False when every valid step's advantage is within `dynamic_tolerance` of 0."""
        p = self.params
        adv, _ = compute_gae(frag["reward"], frag["value"], frag["terminated"],
                             frag["truncated"], frag["valid"], frag[bootstrap("value")],
                             p.gamma, p.gae_lambda)
        valid = np.asarray(frag["valid"], bool)
        return bool(valid.any() and np.abs(adv[valid]).max() > p.dynamic_tolerance)


ALGORITHM = DAPO
