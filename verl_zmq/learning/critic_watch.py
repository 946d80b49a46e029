"""A warning when a learner's critic explains none of the returns it is fit to.

A tanh critic fit to large returns (LunarLander's crashes at -100, gamma 0.999)
can saturate its hidden units and answer one constant for every observation:
its predictions' spread over a batch (`losses/value_spread`, their standard
deviation over the targets') falls to about 0, and explained variance with it,
update after update. The advantages are then returns minus a constant, and PPO
learns as REINFORCE does, from noisier signal. Nothing fails, so nobody
notices; Stable-Baselines3 does the same with rl-baselines3-zoo's LunarLander
settings. Scaling the rewards (`environment.normalize_reward`) keeps the
targets where the critic can follow.

Unscaled targets that are small (under LARGE on average: a solved task's
noise, a game before its first rewards) leave a constant as the best critic
there is, and are not counted: the warning is for the saturation it names.
"""

from __future__ import annotations

from dataclasses import dataclass

METRIC = "losses/value_spread"
LARGE = 10.0  # unscaled value targets this large on average can saturate a tanh critic


@dataclass
class CriticWatch:
    """Counts updates in a row whose value spread is below `floor` (after the first
    `grace` updates, while the critic is still new) and says so once, when
    `patience` of them have passed. A critic that varies but fits noisy returns
    badly (explained variance near 0 on a solved task) is not flat."""

    rewards_scaled: bool = False  # environment.normalize_reward: the hint differs
    floor: float = 0.05
    grace: int = 5
    patience: int = 10
    seen: int = 0
    flat: int = 0
    warned: bool = False

    def check(self, metrics: dict[str, float]) -> dict[str, object] | None:
        """The warning's fields the first time the critic has been flat for
        `patience` updates; None otherwise (and for algorithms without a critic)."""
        if METRIC not in metrics:
            return None
        self.seen += 1
        spread = float(metrics[METRIC])
        large = self.rewards_scaled or float(
            metrics.get("losses/value_target_scale", LARGE)) >= LARGE
        self.flat = self.flat + 1 if self.seen > self.grace and spread < self.floor and large \
            else 0
        if self.warned or self.flat < self.patience:
            return None
        self.warned = True
        hint = ("rewards are scaled already: look at gamma, the value network's size "
                "and vf_coef" if self.rewards_scaled else
                "with large rewards try environment.normalize_reward = true")
        return {"value_spread": round(spread, 5), "updates": self.flat,
                "explained_variance": metrics.get("losses/explained_variance"),
                "value_loss": metrics.get("losses/value_loss"),
                "hint": f"the value network predicts about one constant; {hint}"}
