"""Warnings when learning goes wrong, each with its remedy: the seeds' table of
healthy ranges (entropy, gradient norm, gossip delay) and what the trainers'
users report most (policy lag that keeps growing, a critic that explains
nothing, post-training with no signal). A trainer feeds every update's metrics
to `update` and every metrics report to `report`; a replay shard feeds its
reports to `ShardHealth`. Each kind is said once per process, as a warning
event `health_<kind>`: the launcher shows it on the terminal once per kind and
keeps it in summary.json's warnings. Thresholds are `logging.health.*`.

Entropy is judged against its maximum, `log n`, for plain discrete actions and
tokens only (a Gaussian's entropy has no maximum, a mask lowers it).
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ..config import Job
from ..config.observing import Health
from ..envs.spec import EnvSpec
from ..fatal import CannotGoOn

Warning_ = dict[str, Any]
SPIKES = 3  # gradient spikes among the last 20 updates that make a warning


def max_entropy(spec: EnvSpec) -> float:
    """`log n` for one categorical choice among n (actions or tokens); 0 where the
    entropy has no maximum the policy can reach (Box, MultiDiscrete, masks)."""
    plain = spec.discrete and spec.action_kind in ("", "discrete") and not spec.nvec \
        and not spec.mask and spec.n_actions > 1
    return math.log(spec.n_actions) if plain else 0.0


@dataclass
class Streak:
    """Updates (or reports) in a row for which a condition held."""

    n: int = 0

    def see(self, holds: bool) -> int:
        self.n = self.n + 1 if holds else 0
        return self.n


@dataclass
class HealthWatch:
    """One trainer's health: per update (`update`) and per metrics report
    (`report`); each returns the warnings to log now, `(event, fields)`."""

    job: Job
    max_entropy: float = 0.0
    # gradient spikes are judged for on-policy learners only: an off-policy learner's
    # follow its target network's syncs, whose jumps are routine
    spikes: bool = True
    # the learner's max_grad_norm: spikes are judged on the clipped norm, the one the
    # step takes (a raw norm far past the clip moves the weights no further)
    clip: float = math.inf
    updates: int = 0
    said: set[str] = field(default_factory=set)
    streaks: dict[str, Streak] = field(default_factory=dict)
    grads: deque[float] = field(default_factory=lambda: deque(maxlen=100))
    spiked: deque[bool] = field(default_factory=lambda: deque(maxlen=20))
    early_value_loss: list[float] = field(default_factory=list)
    evs: deque[float] = field(init=False)  # explained variance, the last ev_updates
    last: dict[str, float] = field(default_factory=dict)  # the previous report's
    lags: deque[float] = field(init=False)  # policy lag, the last lag_reports reports

    def __post_init__(self) -> None:
        self.evs = deque(maxlen=max(1, self.H.ev_updates))
        self.lags = deque(maxlen=max(2, self.H.lag_reports))
        self.lag_at: object = None  # the trainer's update count at the last lag counted

    @property
    def H(self) -> Health:
        return self.job.logging.health

    def _streak(self, kind: str, holds: bool) -> int:
        return self.streaks.setdefault(kind, Streak()).see(holds)

    def _say(self, out: list[tuple[str, Warning_]], kind: str, remedy: str,
             **fields: Any) -> None:
        if kind in self.said:
            return
        self.said.add(kind)
        out.append((f"health_{kind}", {**fields, "remedy": remedy}))

    # -- every update -------------------------------------------------------------

    def update(self, m: dict[str, float]) -> list[tuple[str, Warning_]]:
        out: list[tuple[str, Warning_]] = []
        if not self.H.enabled:
            return out
        self.updates += 1
        past_grace = self.updates > self.H.grace_updates
        self._entropy(m, past_grace, out)
        self._gradients(m, past_grace, out)
        self._critic(m, past_grace, out)
        self._post_training(m, out)
        return out

    def _entropy(self, m: dict[str, float], past_grace: bool,
                 out: list[tuple[str, Warning_]]) -> None:
        ent = m.get("losses/entropy")
        if ent is None or self.max_entropy <= 0:
            return
        share = float(ent) / self.max_entropy
        H = self.H
        if self._streak("entropy_low", past_grace and share < H.entropy_collapse) \
                >= H.patience_updates:
            self._say(out, "entropy_collapsed",
                      "the policy acts almost deterministically while it still learns: if "
                      "returns fall short, raise algorithm.params.ent_coef or lower the "
                      "learning rate", entropy=round(float(ent), 5),
                      share_of_max=round(share, 4), updates=H.patience_updates)
        if self._streak("entropy_high", share > H.entropy_stuck) >= H.entropy_stuck_updates:
            self._say(out, "entropy_stuck_at_max",
                      "the policy is still uniform: nothing it did was rewarded differently. "
                      "Check the reward reaches the learner (verl check), lower ent_coef, "
                      "or raise the learning rate", entropy=round(float(ent), 5),
                      share_of_max=round(share, 4), updates=H.entropy_stuck_updates)

    def _gradients(self, m: dict[str, float], past_grace: bool,
                   out: list[tuple[str, Warning_]]) -> None:
        gn = m.get("losses/grad_norm")
        if gn is None:
            return
        gn = float(gn)
        if not math.isfinite(gn):
            self._say(out, "grad_not_finite",
                      "a gradient was NaN or infinite: lower the learning rate, set "
                      "max_grad_norm, scale rewards (environment.normalize_reward)",
                      grad_norm=str(gn))
            return
        # CartPole's critic catching up with returns that jump once it is solved gives raw
        # norms 30 times their median, but clipped to 0.5 they change nothing
        step = min(gn, self.clip)
        if self.spikes and past_grace and len(self.grads) >= 20:
            median = statistics.median(self.grads)
            self.spiked.append(median > 0 and step > self.H.grad_spike * median)
            # a lone outlier is a policy turning (CartPole's after it is solved); spikes
            # that recur are an update that is too large
            if sum(self.spiked) >= SPIKES:
                self._say(out, "grad_spike",
                          "gradient norms far above their recent median, again and again: "
                          "lower the learning rate or max_grad_norm; with large rewards, "
                          "normalize_reward", grad_norm=round(gn, 4),
                          clipped_to=self.clip if math.isfinite(self.clip) else None,
                          recent_median=round(median, 4), factor=round(step / median, 1),
                          spikes=f"{sum(self.spiked)} of the last {len(self.spiked)} updates")
        self.grads.append(step)

    def _critic(self, m: dict[str, float], past_grace: bool,
                out: list[tuple[str, Warning_]]) -> None:
        vl, ev = m.get("losses/value_loss"), m.get("losses/explained_variance")
        H = self.H
        if vl is not None:
            vl = float(vl)
            if not math.isfinite(vl):
                self._say(out, "value_loss_not_finite",
                          "the value loss is NaN or infinite: lower the learning rate, scale "
                          "rewards (environment.normalize_reward)", value_loss=str(vl))
                return
            if past_grace and len(self.early_value_loss) < 20:
                self.early_value_loss.append(vl)
            elif len(self.early_value_loss) >= 20:
                base = statistics.median(self.early_value_loss)
                if base > 0 and vl > H.value_loss_growth * base:
                    self._say(out, "value_loss_exploding",
                              "the value loss grew far past its early level: scale rewards "
                              "(environment.normalize_reward), lower vf_coef or the learning "
                              "rate", value_loss=round(vl, 4), early_median=round(base, 6))
        if ev is None:
            return
        # a window of updates, not a streak: a critic that explains nothing scatters
        # around 0, and one that is worse stays below it on the whole
        if not (past_grace and float(m.get("losses/value_target_spread", 1.0)) > 0.05):
            self.evs.clear()
            return
        self.evs.append(float(ev))
        if len(self.evs) >= H.ev_updates and statistics.fmean(self.evs) < H.ev_floor:
            self._say(out, "critic_explains_nothing",
                      "the critic's predictions miss the returns by more than the returns "
                      "vary: raise vf_coef, check gamma, scale rewards "
                      "(environment.normalize_reward)",
                      explained_variance_mean=round(statistics.fmean(self.evs), 4),
                      updates=H.ev_updates)

    def _post_training(self, m: dict[str, float], out: list[tuple[str, Warning_]]) -> None:
        H = self.H
        none = m.get("grpo/no_signal_groups")
        if none is not None and self._streak("no_signal", float(none) >= 0.999) \
                >= H.no_signal_updates:
            self._say(out, "no_learning_signal",
                      "no group of responses scored differently, so every advantage is 0: "
                      "warm-start with `verl sft`, use a reward with partial credit, or "
                      "algorithm.params.filter_groups = true",
                      updates=H.no_signal_updates)
        kl = m.get("charts/kl_ref")
        if kl is not None and self._streak("kl", float(kl) > H.kl_max) >= H.patience_updates:
            self._say(out, "kl_running_away",
                      "the policy drifts far from its reference: raise algorithm.params.kl_coef "
                      "(or kl_ctrl = \"adaptive\"), lower the learning rate",
                      kl_ref=round(float(kl), 4), kl_max=H.kl_max)

    # -- every metrics report -----------------------------------------------------

    def report(self, r: str, m: dict[str, Any]) -> list[tuple[str, Warning_]]:
        """A trainer's metrics report (`r`: its name, learner or peer)."""
        out: list[tuple[str, Warning_]] = []
        if not self.H.enabled or m.get("final"):
            return out
        H = self.H
        lag = m.get(f"{r}/policy_lag_mean")
        updates = m.get(f"{r}/updates")
        # one lag an update at most: reports closer than a slow learner's updates repeat
        # the last one, and a window of repeats could never rise
        if lag is not None and (updates is None or updates != self.lag_at):
            self.lag_at = updates
            lags = self.lags
            lags.append(float(lag))
            rising = all(b >= a for a, b in zip(lags, list(lags)[1:]))
            if len(lags) == lags.maxlen and rising and lags[-1] - lags[0] >= H.lag_rise \
                    and lags[-1] > 2.0:
                self._say(out, "policy_lag_growing",
                          "samplers act on ever older params: fewer samplers or "
                          "sampling.max_fragments_ahead, a faster learner "
                          "(resources.learner.cpu, a GPU), or algorithm.params.vtrace = true",
                          policy_lag_mean=lag, was=lags[0], reports=H.lag_reports)
        self._stale_fragments(r, m, out)
        self._gossip(m, out)
        return out

    def _delta(self, key: str, value: float) -> float | None:
        prev = self.last.get(key)
        self.last[key] = value
        return None if prev is None else value - prev

    def _window(self, keys: tuple[str, str], values: tuple[float, float], least: int = 10
                ) -> tuple[float, float] | None:
        """The two counters' growth since the window opened, once it holds `least` in
        all; the window stays open until then (a slow process reports fewer per
        interval: a share is judged on as many, however fast it runs)."""
        a, b = keys
        if a not in self.last or b not in self.last:
            self.last[a], self.last[b] = values
            return None
        da, db = values[0] - self.last[a], values[1] - self.last[b]
        if da + db < least:
            return None
        self.last[a], self.last[b] = values
        return da, db

    def _stale_fragments(self, r: str, m: dict[str, Any],
                         out: list[tuple[str, Warning_]]) -> None:
        dropped, taken = m.get(f"{r}/fragments_dropped"), m.get(f"{r}/fragments_from")
        if dropped is None or not isinstance(taken, dict):
            return
        got = self._window(("dropped", "taken"), (float(dropped), float(sum(taken.values()))))
        if got is None:
            return
        d, t = got
        if d / (d + t) > self.H.stale_share and self.updates > self.H.grace_updates:
            self._say(out, "fragments_too_old",
                      "most fragments arrive older than training.max_policy_lag allows and "
                      "are dropped: fewer samplers, a faster learner, or a larger "
                      "max_policy_lag with algorithm.params.vtrace = true",
                      dropped=int(d), taken=int(t))

    def _gossip(self, m: dict[str, Any], out: list[tuple[str, Warning_]]) -> None:
        used, delay = m.get("gossip/grad_used"), m.get("gossip/grad_queue_delay_ms")
        if used is not None and delay is not None:
            du = self._delta("g_used", float(used))
            ds = self._delta("g_delay", float(delay) * float(used))
            if du and ds is not None and du > 0:
                ms = ds / du
                if self._streak("g_delay", ms > self.H.gossip_delay_ms) >= 3:
                    self._say(out, "gossip_delay",
                              "gradients wait long in the queue before they are mixed: fewer "
                              "neighbours (gossip.neighbor_count), compression, or a larger "
                              "gossip.max_queue_size with priority by reward",
                              queue_delay_ms=round(ms, 2), limit_ms=self.H.gossip_delay_ms)
        for what, plural in (("grad", "gradients"), ("batch", "batches")):  # what travels
            stale, got = m.get(f"gossip/{what}_stale_dropped"), m.get(f"gossip/{what}_received")
            if stale is None or got is None:
                continue
            w = self._window((f"{what}_stale", f"{what}_got"), (float(stale), float(got)))
            if w is None:
                continue
            ds_, dg = w
            if dg > 0 and ds_ / dg > self.H.stale_share:
                self._say(out, "gossip_stale",
                          f"most {plural} from neighbours arrive too old and are dropped: "
                          "raise gossip.grad_staleness, or fewer neighbours",
                          dropped=int(ds_), received=int(dg))


@dataclass
class ShardHealth:
    """A replay shard's: samples per insert against `replay.samples_per_insert`."""

    job: Job
    said: bool = False
    last: tuple[float, float] | None = None
    streak: Streak = field(default_factory=Streak)

    def report(self, m: dict[str, Any]) -> list[tuple[str, Warning_]]:
        H, target = self.job.logging.health, self.job.replay.samples_per_insert
        inserted, sampled = m.get("replay/transitions"), m.get("replay/sampled")
        if not H.enabled or self.said or target <= 0 or inserted is None or sampled is None:
            return []
        now = (float(inserted), float(sampled))
        prev, self.last = self.last, now
        # while the learner samples: not before min_size_to_sample, nor once it ended
        if prev is None or now[0] - prev[0] <= 0 or now[1] - prev[1] <= 0:
            return []
        ratio = (now[1] - prev[1]) / (now[0] - prev[0])
        f = H.replay_ratio_factor
        if self.streak.see(not target / f <= ratio <= target * f) < 3:
            return []
        self.said = True
        return [("health_replay_ratio", {
            "samples_per_insert": round(ratio, 3), "target": target,
            "remedy": "the learner samples far more or less than replay.samples_per_insert "
                      "asks: lower replay.error_buffer so the limiter holds it, or change "
                      "the number of samplers against the learner's speed"})]


@dataclass
class NonFinite:
    """Updates in a row whose losses or gradient norm are not finite (the algorithm
    skipped their step); at `limit` (`training.max_nonfinite_updates`, 0: never) the
    job cannot learn, and `see` ends it with the cause instead of training on nothing."""

    limit: int
    streak: int = 0

    def see(self, m: dict[str, float], version: int) -> None:
        bad = sorted(k for k, v in m.items()
                     if k.startswith("losses/") and not math.isfinite(float(v)))
        self.streak = self.streak + 1 if bad else 0
        if self.limit and self.streak >= self.limit:
            raise CannotGoOn(
                f"{self.streak} updates in a row had a loss or gradient that is not finite "
                f"({', '.join(f'{k}={m[k]}' for k in bad[:3])}), at version {version}: each "
                "was skipped and nothing more can be learned. Scale the rewards "
                "(environment.normalize_reward = true), lower "
                "algorithm.params.learning_rate, or check the env's rewards and observations "
                "for NaN or huge values")
