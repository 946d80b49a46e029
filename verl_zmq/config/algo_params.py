"""The algorithms' `[algorithm.params]`: one frozen dataclass each, chosen by
`algorithm.name` (the table in `algorithms.py`), each a `Params`."""

from __future__ import annotations

import difflib
import math
import typing
from dataclasses import dataclass
from typing import Literal

# the names algos/core.py registers (tests/test_algos_core.py keeps them equal)
LossAgg = Literal["token-mean", "step-mean", "seq-mean-token-sum", "seq-mean-token-mean",
                  "seq-mean-token-sum-norm", "fragment-mean"]
KLEstimator = Literal["k1", "kl", "k2", "mse", "k3", "low_var_kl", "abs"]
# the advantage estimators a critic-free (grouped) learner may name
GroupEstimator = Literal["grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline"]
# every name algos/core.py registers, torch-free (tests/test_algos_core.py keeps them
# equal); a "module:function" of one's own is registered the same way when named
ADVANTAGE_ESTIMATORS = ("gae", "vtrace", *typing.get_args(GroupEstimator))
POLICY_LOSSES = ("clipped",)
EXPLORATIONS = ("annealed", "apex")

def named(key: str, value: str, names: tuple[str, ...], empty: bool = False) -> str:
    """Why `value` is neither one of `names` (nor "" where `empty`) nor a
    "module:function" of one's own, or "" when it is."""
    if value in names or (empty and value == "") or ":" in value:
        return ""
    close = difflib.get_close_matches(value, names, n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return (f"algorithm.params.{key}: {value!r} is none of {', '.join(names)}{hint}, nor a "
            f"\"module:function\" of your own")


@dataclass(frozen=True)
class Params:
    """What every algorithm's params declare, so that code outside an algorithm
    reads them by type, never by probing: the step size, the discount, the batch,
    and what the learner's feed and the shards must know (the answers below are
    the defaults; an algorithm's params override what applies to it)."""

    learning_rate: float = 3e-4  # Adam's step size
    gamma: float = 0.99  # discount
    batch_size: int = 256  # what one update learns from (env steps, or transitions)

    def drops_fragments(self) -> bool:
        """Whether fragments may be dropped before an update and more drawn."""
        return False

    def fill_batches(self) -> int:
        """How many batches an update may draw when it drops fragments."""
        return 1

    def n_step_returns(self) -> int:
        """The n of the n-step returns the shards compute (1: one step)."""
        return 1

    def grad_clip(self) -> float:
        """The global gradient norm updates are clipped to (inf: not clipped)."""
        return math.inf

    def problems(self) -> list[str]:
        """What is wrong with these values together: each a sentence naming keys."""
        return []

    def plugins(self) -> dict[str, str]:
        """{key: its value} of the keys that may name a function of one's own."""
        return {}


@dataclass(frozen=True)
class PPOParams(Params):
    """PPO hyper-parameters (Schulman et al. 2017)."""

    learning_rate: float = 3e-4  # Adam's step size
    lr_schedule: Literal["constant", "linear"] = "constant"  # linear: to 0 at the budget
    batch_size: int = 512  # env steps per update
    minibatch_size: int = 64  # env steps (or whole responses) per gradient step
    n_epochs: int = 10  # passes over each batch
    gamma: float = 0.99  # discount
    gae_lambda: float = 0.95  # GAE's lambda (1: Monte Carlo returns, 0: one-step TD)
    clip_range: float = 0.2  # the ratio pi/pi_old is clipped to 1 +- clip_range
    clip_schedule: Literal["constant", "linear"] = "constant"  # linear: to 0 at the budget
    clip_range_vf: float = 0.0  # 0: no value clipping (normalize_value: in its units)
    ent_coef: float = 0.0  # weight of the entropy bonus
    vf_coef: float = 0.5  # weight of the value loss
    max_grad_norm: float = 0.5  # gradients are clipped to this global norm
    normalize_advantage: bool = True  # per minibatch, to mean 0 and std 1
    # the critic learns its targets scaled by the running mean and std of every
    # return seen, its outputs scaled back (MAPPO's value normalisation)
    normalize_value: bool = False
    target_kl: float = 0.0  # 0: no early stop on KL
    vtrace: bool = False  # V-trace targets and advantages: stale fragments are corrected
    vtrace_rho_bar: float = 1.0  # truncation of the importance weights in the targets/PG
    vtrace_c_bar: float = 1.0  # truncation of the trace-cutting coefficients
    # KL to a frozen reference policy (the initial one, `algorithm.init_from`'s): 0 is off
    kl_coef: float = 0.0
    # k1 (= kl): log(pi/ref); k2 (= mse): its square / 2; k3 (= low_var_kl):
    # ref/pi - log(ref/pi) - 1, clamped to 10; abs: |log(pi/ref)|
    kl_estimator: KLEstimator = "k1"
    kl_in: Literal["reward", "loss"] = "reward"  # a per-token penalty, or a loss term
    # the coefficient fixed, or "adaptive": moved towards `kl_target` over `kl_horizon`
    # responses (steps) as verl's kl_ctrl
    kl_ctrl: Literal["fixed", "adaptive"] = "fixed"
    kl_target: float = 0.1  # kl_ctrl = "adaptive": the KL the coefficient steers towards
    kl_horizon: float = 10000.0  # kl_ctrl = "adaptive": responses (steps) to get there
    # how per-step losses become one (algos/core.py's aggregations): "token-mean" (=
    # "step-mean"), "seq-mean-token-sum", "seq-mean-token-mean" (per episode or
    # response), "seq-mean-token-sum-norm" (sums over `loss_scale_factor`, 0: the
    # longest response or the fragment length), "fragment-mean"
    loss_agg: LossAgg = "token-mean"
    loss_scale_factor: float = 0.0  # "seq-mean-token-sum-norm"'s divisor; 0: see loss_agg
    clip_ratio_c: float = 0.0  # > 1: dual-clip PPO's bound on negative advantages (verl: 3)
    # recurrent policies: the steps of one training sequence (a chunk of a fragment,
    # which starts from the state its sampler shipped); 0: the whole fragment
    recurrence: int = 0
    # "": GAE (V-trace with vtrace = true); a name algos/core.py registers (gae,
    # vtrace, grpo, rloo, reinforce_plus_plus, reinforce_plus_plus_baseline); or a
    # "module:function" of your own, (AdvantageInput) -> Advantages
    adv_estimator: str = ""
    # "": the algorithm's own (clipped); or a "module:function" of your own, (new_logp,
    # old_logp, adv, clip_low, clip_high, clip_ratio_c) -> (per-step loss, ratio)
    policy_loss: str = ""
    # the grouped estimators (grpo): divide by the group's std; false as in Dr. GRPO
    std_normalize: bool = True
    # sequence tasks: punish responses longer than max_response - overlong_buffer_len
    # tokens, linearly down to -overlong_penalty_factor at max_response (0: off)
    overlong_buffer_len: int = 0
    overlong_penalty_factor: float = 1.0  # see overlong_buffer_len
    # the decoupled objective for stale fragments (AReaL's use_decoupled_loss): the
    # ratio is clipped around the policy as each update starts (its log-probabilities
    # recomputed once per batch), and each step is weighted by that policy over the
    # sampler's (the behaviour's); false: the ratio to the behaviour policy, clipped
    decoupled_loss: bool = False
    behav_imp_weight_cap: float = 0.0  # decoupled_loss: the weight's ceiling; 0: none

    def grad_clip(self) -> float:
        return self.max_grad_norm

    def decoupled_clip(self) -> tuple[float, float]:
        """The ratio's clip (1 - low, 1 + high) where an algorithm decouples it."""
        return self.clip_range, self.clip_range

    def plugins(self) -> dict[str, str]:
        return {"adv_estimator": self.adv_estimator, "policy_loss": self.policy_loss}

    def problems(self) -> list[str]:
        out = [why for key, value, names in (
            ("adv_estimator", self.adv_estimator, ADVANTAGE_ESTIMATORS),
            ("policy_loss", self.policy_loss, POLICY_LOSSES))
            if (why := named(key, value, names, empty=True))]
        if self.minibatch_size > self.batch_size:
            out.append(f"algorithm.params.minibatch_size: {self.minibatch_size} is larger "
                       f"than algorithm.params.batch_size {self.batch_size}")
        return out


@dataclass(frozen=True)
class DQNParams(Params):
    """DQN hyper-parameters (double DQN, optional dueling, n-step)."""

    learning_rate: float = 1e-3  # Adam's step size
    lr_schedule: Literal["constant", "linear"] = "constant"  # linear: to 0 at the budget
    batch_size: int = 64  # transitions per update
    gamma: float = 0.99  # discount
    n_step: int = 1  # n-step returns, computed by the shards
    target_update_interval: int = 500  # updates between two target-network updates
    tau: float = 1.0  # target update: theta' <- tau theta + (1 - tau) theta' (1: a copy)
    learning_starts: int = 1_000  # the job's first env steps act uniformly at random
    # epsilon-greedy: "annealed" from eps_start to eps_end, "apex": Ape-X's fixed
    # per-sampler ones, or a "module:function" of your own, (env_steps, worker_index,
    # num_workers) -> epsilon (after learning_starts)
    exploration: str = "annealed"
    eps_start: float = 1.0  # annealed: the first epsilon
    eps_end: float = 0.05  # annealed: the last epsilon
    eps_decay_steps: int = 10_000  # annealed: env steps from eps_start to eps_end
    apex_eps: float = 0.4  # apex: sampler i of N acts with apex_eps ^ (1 + apex_alpha i/(N-1))
    apex_alpha: float = 7.0  # apex: see apex_eps
    max_grad_norm: float = 10.0  # gradients are clipped to this global norm

    def grad_clip(self) -> float:
        return self.max_grad_norm

    def n_step_returns(self) -> int:
        return self.n_step

    def plugins(self) -> dict[str, str]:
        return {"exploration": self.exploration}

    def problems(self) -> list[str]:
        why = named("exploration", self.exploration, EXPLORATIONS)
        return [why] if why else []


@dataclass(frozen=True)
class SACParams(Params):
    """SAC hyper-parameters (Haarnoja et al. 2018, automatic entropy)."""

    learning_rate: float = 3e-4  # Adam's step size (actor, critics, temperature)
    batch_size: int = 256  # transitions per update
    gamma: float = 0.99  # discount
    tau: float = 0.005  # target critics: theta' <- tau theta + (1 - tau) theta'
    learning_starts: int = 1_000  # env steps of random actions (uniform; tanh of coloured noise)
    init_alpha: float = 1.0  # the entropy temperature at the start
    autotune_alpha: bool = True  # false: the temperature stays at init_alpha
    target_entropy: float = 0.0  # 0: -dim(action)
    noise_beta: float = 0.0  # acting noise's spectrum 1/f^beta: 0 white, 1 pink (persists)
    noise_horizon: int = 1000  # steps per block of correlated noise (about an episode)

    def problems(self) -> list[str]:
        if 0 <= self.noise_beta <= 3 and self.noise_horizon >= 2:
            return []
        return [f"algorithm.params.noise_beta / noise_horizon: expected 0 <= noise_beta <= 3 "
                f"and noise_horizon >= 2, got {self.noise_beta} and {self.noise_horizon}"]


@dataclass(frozen=True)
class DAPOParams(PPOParams):
    """DAPO local update: PPO with decoupled clip and dynamic sampling."""

    clip_low: float = 0.2  # the ratio is clipped to [1 - clip_low, 1 + clip_high]
    clip_high: float = 0.28  # (decoupled: a higher ceiling keeps rare actions learning)
    loss_agg: LossAgg = "step-mean"
    # drop fragments whose advantages are all within dynamic_tolerance of each other
    # (no learning signal) and draw more, up to max_fill_batches batches
    dynamic_sampling: bool = False
    dynamic_tolerance: float = 1e-6  # see dynamic_sampling
    max_fill_batches: int = 4  # see dynamic_sampling

    def drops_fragments(self) -> bool:
        return self.dynamic_sampling

    def decoupled_clip(self) -> tuple[float, float]:
        return self.clip_low, self.clip_high

    def fill_batches(self) -> int:
        return self.max_fill_batches if self.dynamic_sampling else 1


@dataclass(frozen=True)
class GRPOParams(PPOParams):
    """GRPO (Shao et al. 2024): no critic; each response's advantage is its reward
    against the other responses to the same prompt (`environment.kwargs.group_size`)."""

    learning_rate: float = 1e-3
    n_epochs: int = 1
    gamma: float = 1.0
    normalize_advantage: bool = False  # the group already normalises
    vf_coef: float = 0.0
    max_grad_norm: float = 1.0
    clip_low: float = 0.2  # the decoupled clip of DAPO (Yu et al. 2025): [1 - low, 1 + high]
    clip_high: float = 0.28  # see clip_low
    loss_agg: LossAgg = "token-mean"
    kl_estimator: KLEstimator = "k3"
    kl_in: Literal["reward", "loss"] = "loss"
    # verl's adv_estimator: group-normalised (grpo), leave-one-out (rloo), or
    # REINFORCE++ (per-token returns whitened over the batch; _baseline: less the
    # group's mean first)
    adv_estimator: str = "grpo"
    # verl's DAPO recipe: drop groups whose scores are all equal and draw more
    # fragments until the batch is full (at most `max_fill_batches` draws)
    filter_groups: bool = False
    max_fill_batches: int = 4  # see filter_groups
    # the Hugging Face learner (kind = "hf") alone: a minibatch's forward and
    # backward passes in micro-batches of this many responses (verl's
    # ppo_micro_batch_size), or of at most this many prompt + response tokens
    # (verl's use_dynamic_bsz with ppo_max_token_len_per_gpu); gradients are
    # accumulated so that the step is the whole minibatch's. 0: one pass
    micro_batch_size: int = 0
    max_tokens_per_forward: int = 0  # see micro_batch_size
    lr_warmup_steps: int = 0  # kind = "hf": updates of linear warm-up (verl's lr_warmup_steps)
    # kind = "hf" with adv_estimator = "gae" (PPO: a value head on the last hidden
    # state): updates in which the value head alone learns (verl's critic_warmup)
    critic_warmup: int = 0

    def drops_fragments(self) -> bool:
        return self.filter_groups

    def problems(self) -> list[str]:
        out = super().problems()
        for key in ("micro_batch_size", "max_tokens_per_forward", "lr_warmup_steps"):
            if getattr(self, key) < 0:
                out.append(f"algorithm.params.{key}: must be 0 (off) or more")
        if self.micro_batch_size and self.max_tokens_per_forward:
            out.append("algorithm.params.micro_batch_size and max_tokens_per_forward: "
                       "set one (responses per forward, or tokens per forward)")
        return out

    def decoupled_clip(self) -> tuple[float, float]:
        return self.clip_low, self.clip_high

    def fill_batches(self) -> int:
        return self.max_fill_batches if self.filter_groups else 1
