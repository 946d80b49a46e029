"""PPO (Schulman et al. 2017, "Proximal Policy Optimization Algorithms").

Samplers record `logp` and `value` per step; the learner computes GAE from
each fragment's rewards, values and bootstrap value, then runs minibatch
epochs of the clipped surrogate with a value loss (optionally clipped), an
entropy bonus and gradient clipping. Learning rate and clip range can anneal
linearly with env steps. Discrete (categorical) and continuous (diagonal
Gaussian) actions.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Generic, TypeVar

import numpy as np
import torch

from ..batch import STATE, episodes
from ..config import PPOParams
from ..config.sections import ceil_div
from ..envs.spaces import gather
from ..policy.encoders import obs_apply, obs_tensor
from ..policy.net import PolicyHead, PolicyNet
from ..policy.nets import actor_critic
from ..policy.numpy_actor import env_action_of
from ..policy.value_norm import attach_value_norm, in_returns
from .base import START, Algorithm, Learned, Progress, adam, scheduled
from .core import (
    ADVANTAGE_ESTIMATORS,
    AGGREGATIONS,
    KL_ESTIMATORS,
    POLICY_LOSSES,
    AdvantageInput,
    KLController,
    clipped_surrogate,
    compute_gae,
    critic_fit,
    lookup,
)
from .grouped import minibatch_indices, sequence_horizon
from .recipe import Recipe
from .recurrence import Passed, act_recurrent, cut_sequences, sequence_pass
from .reference import reference_logp
from .update import (
    behaviour_weighted,
    clip_stats,
    kl_loss,
    kl_to_reference,
    optimiser_step,
    proximal_logp,
    value_loss,
)

__all__ = ["PPO", "Recipe", "clipped_surrogate", "compute_gae"]

Arrays = Mapping[str, np.ndarray]


PG = TypeVar("PG", bound=PPOParams)  # the policy-gradient family's params


class PPO(Algorithm[PG], Generic[PG]):
    """Proximal Policy Optimisation (Schulman et al. 2017) and its family: one
    update composed of registered functions (`core.py`) as the class's `Recipe`
    and the job's params name them."""

    name = "ppo"
    recipe: ClassVar[Recipe] = Recipe()
    state_attrs = ("net", "opt", "ref")  # ref: None without a KL term

    def __init__(self, job: Any, spec: Any, device: str = "cpu", **kw: Any):
        super().__init__(job, spec, device, **kw)
        p, r = self.params, self.recipe
        self.progress = 0.0  # of the update running now: schedules read it
        self.advantage_fn = lookup(ADVANTAGE_ESTIMATORS, p.adv_estimator
                                   or r.advantage or ("vtrace" if p.vtrace else "gae"),
                                   "algorithm.params.adv_estimator")
        self.policy_loss_fn = lookup(POLICY_LOSSES, p.policy_loss or r.policy_loss,
                                     "algorithm.params.policy_loss")
        self.aggregate = lookup(AGGREGATIONS, p.loss_agg, "algorithm.params.loss_agg")
        self.kl_fn = lookup(KL_ESTIMATORS, p.kl_estimator, "algorithm.params.kl_estimator")
        # sequence tasks: a sampler's env answers each prompt group_size times
        self.group_size = int(job.environment.kwargs.get("group_size", 1))
        self.max_response = sequence_horizon(job)
        # the constant divisor of "seq-mean-token-sum-norm"
        self.horizon = float(p.loss_scale_factor or self.max_response
                             or job.sampling.fragment_length)
        self.kl_ctl = KLController(p.kl_coef, p.kl_ctrl, p.kl_target, p.kl_horizon)
        self.filter_stats: dict[str, float] = {}  # what a fragment filter counted
        self.net = actor_critic(spec, job.algorithm.policy).to(self.device)
        self.leaves = spec.leaves
        # recurrent policies learn on sequences of `chunk` steps (a fragment's, or a
        # part of one) that start from the state their sampler shipped
        self.recurrent = bool(self.net.recurrent)
        self.state_size = self.net.state_size if self.recurrent else 0  # type: ignore[assignment]
        self.chunk = p.recurrence or job.sampling.fragment_length
        self.init_policy()
        # after the initial params (which have none)
        self.value_norm = attach_value_norm(self.net, p.normalize_value and r.critic,
                                            self.device)
        self.ref: PolicyNet | None = None  # the frozen reference policy of the KL term
        self.kl_ref = 0.0  # the last batch's mean KL of the behaviour policy to it
        if p.kl_coef > 0:
            self.ref = copy.deepcopy(self.net).requires_grad_(False)
        self.opt = adam(self.net.parameters(), p.learning_rate, eps=1e-5)
        if spec.continuous:
            self.low = np.array(spec.action_low, np.float32)
            self.high = np.array(spec.action_high, np.float32)

    def policy_module(self) -> torch.nn.Module:
        return self.net

    def export_head(self) -> tuple[torch.nn.Module, str]:
        kind = {"box": "clip", "multibinary": "positive"}.get(self.spec.kind, "argmax")
        return PolicyHead(self.net), kind

    def act(self, obs: np.ndarray, deterministic: bool = False, env_steps: int = 0,
            state: Any = None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        with torch.no_grad():
            o = obs_tensor(obs, self.device)
            if self.recurrent:
                return self._act_recurrent(o, deterministic, state)
            d = self.net.dist(o, acting=True)
            a = self.net.mode(d) if deterministic else self.net.sample(d)
            extras = {"logp": self.net.log_prob(d, a).cpu().numpy()}
            if self.recipe.critic:
                v = in_returns(self.value_norm, self.net.value(o, acting=True))
                extras["value"] = v.cpu().numpy()
        return a.cpu().numpy(), extras

    def _act_recurrent(self, o: Any, deterministic: bool, state: Any
                       ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        return act_recurrent(self.net, o, deterministic, state, self.device)

    def env_action(self, action: np.ndarray) -> np.ndarray:
        """What the env receives: continuous actions clipped to the Box bounds."""
        if self.spec.continuous:
            clipped: np.ndarray = np.clip(action, self.low, self.high)
            return clipped
        return env_action_of(self.spec, action)

    def _flat_obs(self, batch: Arrays, prefix: str = "") -> Any:
        """A batch's [T, N, ...] observation columns as [T * N, ...] tensors."""
        def flat(x: Any) -> np.ndarray:
            out: np.ndarray = np.asarray(x)
            return out.reshape(-1, *out.shape[2:]) if not prefix else out
        return obs_tensor(obs_apply(gather(batch, self.leaves, prefix), flat), self.device)

    def _sequence_pass(self, batch: Arrays) -> Passed:
        return sequence_pass(self.net, batch, self.leaves, self.chunk, self.device)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "kl_coef": self.kl_ctl.value}  # adapted, or fixed

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.kl_ctl.value = float(state.get("kl_coef", self.kl_ctl.value))

    # -- learning ---------------------------------------------------------------

    def clip(self) -> tuple[float, float]:
        """The ratio's clip range (1 - low, 1 + high) of the update running now."""
        p = self.params
        if self.recipe.decoupled_clip:
            return p.decoupled_clip()
        c = scheduled(p.clip_range, p.clip_schedule, self.progress)
        return c, c

    def _now(self, batch: Arrays) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The current network's log pi(a_t|x_t), V(x_t) and V(bootstrap obs)."""
        if self.recurrent:
            return self._sequence_pass(batch)[:3]
        T, N = batch["reward"].shape
        with torch.no_grad():
            obs_t = self._flat_obs(batch)
            act = torch.as_tensor(np.asarray(batch["action"]).reshape(T * N, *np.shape(
                batch["action"])[2:]), device=self.device)
            logp = self.net.log_prob(self.net.dist(obs_t), act).reshape(T, N)
            value = in_returns(self.value_norm, self.net.value(obs_t)).reshape(T, N)
            boot = in_returns(self.value_norm,
                              self.net.value(self._flat_obs(batch, "bootstrap_")))
        return logp.cpu().numpy(), value.cpu().numpy(), boot.cpu().numpy()

    def prepare(self, batch: Arrays, columns: dict[str, np.ndarray] | None = None
                ) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
        """Advantages and returns, then [T, N] flattened to the steps learned from, as
        tensors (with `columns`, more [T, N] columns alike); and the advantage
        estimator's metrics. With a reference policy, its log-probabilities; with
        `kl_in = "reward"`, the KL penalty per token."""
        T, N = batch["reward"].shape
        ordinal, how = episodes(np.asarray(batch["terminated"], bool),
                                np.asarray(batch["truncated"], bool),
                                np.asarray(batch["valid"], bool))
        if self.recipe.whole_responses:  # only responses that ended and were scored
            cols = np.broadcast_to(np.arange(N), (T, N))
            batch = {**batch, "valid": np.asarray(batch["valid"], bool)
                     & (how == 1)[cols, ordinal]}
        valid = np.asarray(batch["valid"], bool)
        # each step's episode (its column's k-th): a sequence model takes one pass each
        columns = {**(columns or {}), "seq": np.arange(N) * how.shape[1] + ordinal}
        if self.ref is not None:
            ref = reference_logp(self.ref, batch, self._flat_obs(batch), columns["seq"],
                                 self.device)
            batch, self.kl_ref = kl_to_reference(batch, ref, valid, self.kl_ctl,
                                                 self.params.kl_in)
            columns["ref_logp"] = ref
        est = self.advantage_fn(AdvantageInput(batch, self.params, lambda: self._now(batch),
                                               ordinal, how, self.group_size,
                                               self.max_response))
        if self.value_norm is not None:  # before the epochs: their targets are scaled alike
            self.value_norm.update(np.asarray(est.ret)[valid])
        if self.recurrent:
            return self._sequences(batch, est, columns), est.stats
        mask = valid.reshape(-1)
        col = np.broadcast_to(np.arange(N), (T, N)).reshape(-1)

        def flat(x: Any) -> torch.Tensor:
            x = np.asarray(x)
            return self.to_device(x.reshape(T * N, *x.shape[2:])[mask])

        obs = {c: flat(batch[c]) for c in self._obs_columns()}
        if "obs" in obs:
            obs["obs"] = obs["obs"].float()
        data = {**obs, "action": flat(batch["action"]),
                "logp": flat(batch["logp"]).float(), "value": flat(est.value).float(),
                "adv": flat(est.adv), "ret": flat(est.ret),
                "column": self.to_device(col[mask]),
                **{k: flat(v) for k, v in columns.items()}}
        return data, est.stats

    def _obs_columns(self) -> tuple[str, ...]:
        return tuple(leaf.column for leaf in self.leaves)

    def _sequences(self, batch: Arrays, est: Any, columns: dict[str, np.ndarray]
                   ) -> dict[str, torch.Tensor]:
        starts = self._sequence_pass(batch)[3] if batch["reward"].shape[0] > self.chunk \
            else np.asarray(batch[STATE])[None]
        return cut_sequences(batch, est, columns, self._obs_columns(), self.chunk, starts,
                             self.to_device)

    _STEPWISE = ("action", "logp", "value", "adv", "ret", "column", "seq", "ref_logp")

    def _forward(self, mb: Mapping[str, torch.Tensor]) -> tuple[
            Any, Any, Mapping[str, torch.Tensor]]:
        """The policy on a minibatch, its values (on demand) and the minibatch's
        per-step tensors as flat [B] valid steps (a recurrent minibatch of sequences
        is unrolled, then its valid steps taken)."""
        obs = gather(mb, self.leaves)
        if not self.recurrent:
            seq = mb.get("seq")  # each step's episode, where the minibatch says
            return self.net.dist(obs, seq), lambda: self.net.value(obs, seq), mb
        out, v, _ = self.net.unroll(obs, mb["state0"], mb["first"])  # type: ignore[operator]
        m = mb["valid"]
        flat = {k: t[m] for k, t in mb.items() if k in self._STEPWISE}
        return self.net.make_dist(out[m]), lambda: v[m], flat

    def kl_term(self, new_logp: torch.Tensor, mb: Mapping[str, torch.Tensor],
                stats: dict[str, Any]) -> torch.Tensor:
        """`kl_coef` x the KL to the reference (aggregated like the policy loss) when
        it is a loss term; else 0."""
        if self.ref is None or self.params.kl_in != "loss":
            return torch.zeros((), device=self.device)
        return kl_loss(self.kl_fn, self.aggregate, self.kl_ctl, new_logp, mb["ref_logp"], mb,
                       self.horizon, stats)

    def loss(self, mb: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, Any]]:
        p, critic = self.params, self.recipe.critic
        d, values, mb = self._forward(mb)
        new_logp = self.net.log_prob(d, mb["action"])
        adv = mb["adv"]
        if critic and p.normalize_advantage and adv.numel() > 1:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        low, high = self.clip()
        stats: dict[str, Any] = {}
        # the clip's anchor: the behaviour policy, or (decoupled) the policy as this
        # update started, each step then weighted by it over the behaviour's
        anchor = mb.get("prox_logp", mb["logp"])
        pg, ratio = self.policy_loss_fn(new_logp, anchor, adv, low, high, p.clip_ratio_c)
        if "prox_logp" in mb:
            pg = behaviour_weighted(pg, anchor, mb["logp"], p.behav_imp_weight_cap, stats)
        pg_loss = self.aggregate(pg, mb, self.horizon)
        loss = pg_loss
        if critic:
            v_loss = value_loss(values(), mb["ret"], mb["value"], p.clip_range_vf,
                                self.value_norm)
            loss = loss + p.vf_coef * v_loss
            stats["losses/value_loss"] = v_loss
        entropy = self.net.entropy(d).mean()
        loss = loss - p.ent_coef * entropy + self.kl_term(new_logp, mb, stats)
        # post-training: verl's names beside ours
        stats |= clip_stats(new_logp, anchor, ratio, low, high, self.recipe.whole_responses)
        with torch.no_grad():
            stats |= {"losses/policy_loss": pg_loss, "losses/entropy": entropy}
            if p.clip_ratio_c > 1.0:
                stats["actor/pg_clipfrac_lower"] = ((adv < 0) & (ratio > p.clip_ratio_c)
                                                    ).float().mean()
        return loss, stats

    def _minibatches(self, n: int, mbs: int, seq: torch.Tensor,
                     shuffle: bool = True) -> list[torch.Tensor]:
        """One epoch's minibatch indices (`grouped.minibatch_indices`); reducing
        gradients with peers, the job's batch over its minibatch size of them."""
        p = self.params
        count = ceil_div(p.batch_size, p.minibatch_size) if self.reduce_grads else None
        return minibatch_indices(n, mbs, seq, self.recipe.whole_responses, count, shuffle)

    def learn(self, batch: Arrays, at: Progress = START) -> Learned:
        p = self.params
        fraction = at.fraction
        if self.reduce_grads is not None:  # the group's progress: one schedule for all
            fraction = self.reduce_grads(None, {"fraction": fraction})["fraction"]
        self.progress = fraction
        for g in self.opt.param_groups:
            g["lr"] = scheduled(p.learning_rate, p.lr_schedule, self.progress)
        data, estimated = self.prepare(batch)
        n = len(data["adv"])  # steps, or a recurrent update's sequences
        mbs = max(1, p.minibatch_size // self.chunk) if self.recurrent else p.minibatch_size
        if p.decoupled_loss:
            data["prox_logp"] = self._proximal(data, max(1, min(mbs, n)))
        sums, count = self._epochs(data, at, max(1, min(mbs, n)))
        self.updates += 1
        out = {k: float(v) / max(count, 1) for k, v in sums.items()}
        if self.recipe.critic:
            y, pred = data["ret"], data["value"]
            if self.recurrent:
                y, pred = y[data["valid"]], pred[data["valid"]]
            out.update(critic_fit(y, pred))
        out["charts/learning_rate"] = self.opt.param_groups[0]["lr"]
        out["charts/clip_range"] = self.clip()[1]
        out["charts/batch_steps"] = float(data["valid"].sum()) if self.recurrent else float(n)
        if self.ref is not None:
            out["charts/kl_ref"] = self.kl_ref
            out["actor/kl_coef"] = self.kl_ctl.value
            # adapted after the update, on the batch's KL to the reference: verl counts
            # its batch in responses, where a batch is of responses
            self.kl_ctl.update(self.kl_ref, int(estimated.get("grpo/responses", n)))
        out.update(estimated)
        out.update(self.filter_stats)
        return Learned(out, samples={"advantages": data["adv"]})

    def _proximal(self, data: dict[str, torch.Tensor], mbs: int) -> torch.Tensor:
        """The decoupled loss's anchor (`update.proximal_logp`), once per batch."""
        def logp(mb: Mapping[str, torch.Tensor]) -> torch.Tensor:
            d, _, flat = self._forward(mb)
            return self.net.log_prob(d, flat["action"])

        parts = self._minibatches(len(data["adv"]), mbs, data["seq"], shuffle=False)
        with self.autocast():
            return proximal_logp(data, logp, parts)

    def _epochs(self, data: dict[str, torch.Tensor], at: Progress,
                mbs: int) -> tuple[dict[str, Any], int]:
        """`n_epochs` passes of minibatch steps (fewer when `target_kl` stops them):
        each step's statistics summed as tensors (read once, after), and the count."""
        p = self.params
        n = len(data["adv"])
        sums: dict[str, Any] = {}
        count = 0
        params = list(self.net.parameters())
        for _ in range(p.n_epochs):
            for idx in self._minibatches(n, mbs, data["seq"]):
                mb = {k: v[idx] for k, v in data.items()}
                with self.autocast():
                    loss, stats = self.loss(mb)
                    loss = loss + self._bc_term(at, stats)
                reduce = None if self.reduce_grads is None else \
                    functools.partial(self._reduce, params, stats)
                stats["losses/grad_norm"] = optimiser_step(self.opt, loss, params,
                                                           p.max_grad_norm, reduce)
                for k, v in stats.items():  # tensors summed: one float each after the update
                    v = v.detach() if torch.is_tensor(v) else v
                    sums[k] = sums[k] + v if k in sums else v
                count += 1
                if p.target_kl and float(stats["losses/approx_kl"]) > 1.5 * p.target_kl:
                    return sums, count
        return sums, count

    def _reduce(self, params: Sequence[torch.Tensor], stats: dict[str, Any]) -> None:
        """A gossip peer's gradient round: the group's gradient, and its KL."""
        assert self.reduce_grads is not None
        kl = float(stats["losses/approx_kl"])
        stats["losses/approx_kl"] = self.reduce_grads(params, {"approx_kl": kl})["approx_kl"]

    def _bc_term(self, at: Progress, stats: dict[str, Any]) -> torch.Tensor | float:
        """Behaviour cloning on demonstrations: w x -log pi(a_demo | s_demo), or 0."""
        bc = self.bc_batch(at.env_steps)
        if bc is None:
            return 0.0
        w, obs, act = bc
        d = self.net.dist(obs)
        bc_loss = -self.net.log_prob(d, act if not self.spec.continuous else act.float()).mean()
        stats["losses/bc_loss"] = bc_loss.detach()
        stats["charts/bc_weight"] = w
        return w * bc_loss


ALGORITHM = PPO
