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

import numpy as np
import torch

from ..batch import bootstrap, episodes
from ..config.sections import ceil_div
from ..nets import actor_critic
from .base import START, Algorithm, Learned, Progress, adam, clip_grad_norm, scheduled
from .reference import kl_estimate
from .vtrace import vtrace


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


def clipped_surrogate(new_logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor,
                      clip_low: float, clip_high: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-step PPO policy loss with the ratio clipped to [1 - low, 1 + high]; and the ratio."""
    ratio = (new_logp - old_logp).exp()
    loss = torch.max(-adv * ratio, -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high))
    return loss, ratio


class PPO(Algorithm):
    """Proximal Policy Optimisation with GAE, on FIFO replay."""

    name = "ppo"
    state_attrs = ("net", "opt")

    def __init__(self, job, spec, device: str = "cpu", **kw):
        super().__init__(job, spec, device, **kw)
        self.progress = 0.0  # of the update running now: schedules read it
        pol = job.algorithm.policy
        self.net = actor_critic(spec, pol).to(self.device)
        self.init_policy()
        self.ref = None  # the frozen reference policy of the KL term
        self.kl_ref = 0.0  # the last batch's mean KL of the behaviour policy to it
        if self.params.kl_coef > 0:
            self.ref = copy.deepcopy(self.net).requires_grad_(False)
            self.state_attrs = (*self.state_attrs, "ref")
        self.opt = adam(self.net.parameters(), self.params.learning_rate, eps=1e-5)
        if not spec.discrete:
            self.low = np.array(spec.action_low, np.float32)
            self.high = np.array(spec.action_high, np.float32)

    def policy_module(self) -> torch.nn.Module:
        return self.net

    def export_head(self):
        # a convolutional net's policy head reads the encoder's features, not images
        enc = getattr(self.net, "encoder", None)
        head = torch.nn.Sequential(enc, self.net.pi) if enc is not None else self.net.pi
        return head, "argmax" if self.spec.discrete else "clip"

    def act(self, obs, deterministic=False, env_steps=0):
        with torch.no_grad():
            o = torch.as_tensor(obs, dtype=torch.float32, device=self.device)
            d = self.net.dist(o, acting=True)
            a = self.net.mode(d) if deterministic else d.sample()
            logp = self.net.log_prob(d, a)
            v = self.net.value(o, acting=True)
        return a.cpu().numpy(), {"logp": logp.cpu().numpy(), "value": v.cpu().numpy()}

    def env_action(self, action: np.ndarray) -> np.ndarray:
        """What the env receives: continuous actions clipped to the Box bounds."""
        return action if self.spec.discrete else np.clip(action, self.low, self.high)

    # -- learning ---------------------------------------------------------------

    def _schedule(self, value: float, kind: str) -> float:
        return scheduled(value, kind, self.progress)

    def _clip(self) -> tuple[float, float]:
        c = self._schedule(self.params.clip_range, self.params.clip_schedule)
        return c, c

    def _now(self, batch: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The current network's log pi(a_t|x_t), V(x_t) and V(bootstrap obs)."""
        T, N = batch["reward"].shape
        with torch.no_grad():
            obs = np.asarray(batch["obs"])
            obs = torch.as_tensor(obs.reshape(T * N, *obs.shape[2:]),
                                  dtype=torch.float32, device=self.device)
            act = torch.as_tensor(np.asarray(batch["action"]).reshape(T * N, *np.shape(
                batch["action"])[2:]), device=self.device)
            logp = self.net.log_prob(self.net.dist(obs), act).reshape(T, N)
            value = self.net.value(obs).reshape(T, N)
            boot = self.net.value(torch.as_tensor(
                np.asarray(batch[bootstrap("obs")]), dtype=torch.float32,
                device=self.device))
        return logp.cpu().numpy(), value.cpu().numpy(), boot.cpu().numpy()

    def advantages(self, batch: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
        """(advantages, returns, values the value loss is clipped around): GAE from the
        values samplers recorded or, with `vtrace`, V-trace from the current network's
        log-probabilities and values (stale fragments are corrected, not dropped)."""
        p = self.params
        if not p.vtrace:
            adv, ret = compute_gae(batch["reward"], batch["value"], batch["terminated"],
                                   batch["truncated"], batch["valid"],
                                   batch[bootstrap("value")], p.gamma, p.gae_lambda)
            return adv, ret, batch["value"]
        logp, value, boot = self._now(batch)
        adv, ret = vtrace(batch["reward"], value, batch["terminated"], batch["truncated"],
                          batch["valid"], boot, logp - batch["logp"], p.gamma,
                          p.gae_lambda, p.vtrace_rho_bar, p.vtrace_c_bar)
        return adv, ret, value

    def _ref_logp(self, batch: dict[str, np.ndarray], seq: np.ndarray) -> np.ndarray:
        """The reference policy's log pi_ref(a_t|x_t), [T, N] (0 where invalid)."""
        T, N = batch["reward"].shape
        mask = np.asarray(batch["valid"], bool).reshape(-1)
        out = np.zeros(T * N, np.float32)
        if mask.any():
            obs = np.asarray(batch["obs"])
            obs = obs.reshape(T * N, *obs.shape[2:])[mask]
            act = np.asarray(batch["action"]).reshape(T * N, *np.shape(batch["action"])[2:])
            with torch.no_grad():
                o = torch.as_tensor(obs, dtype=torch.float32, device=self.device)
                a = torch.as_tensor(act[mask], device=self.device)
                s = torch.as_tensor(seq.reshape(-1)[mask], device=self.device)
                out[mask] = self.ref.log_prob(self.ref.dist(o, s), a).cpu().numpy()
        return out.reshape(T, N)

    def prepare(self, batch: dict[str, np.ndarray],
                columns: dict[str, np.ndarray] | None = None) -> dict[str, torch.Tensor]:
        """Advantages and returns, then flatten [T, N] to the valid steps as tensors
        (with `columns`, more [T, N] columns alike). With a reference policy, its
        log-probabilities; with `kl_in = "reward"`, the KL penalty per token."""
        T, N = batch["reward"].shape
        valid = np.asarray(batch["valid"], bool)
        ordinal, how = episodes(np.asarray(batch["terminated"], bool),
                                np.asarray(batch["truncated"], bool), valid)
        # each step's episode (its column's k-th): a sequence model takes one pass each
        columns = {**(columns or {}), "seq": np.arange(N) * how.shape[1] + ordinal}
        if self.ref is not None:
            ref = self._ref_logp(batch, columns["seq"])
            k1 = np.where(valid, batch["logp"] - ref, 0.0).astype(np.float32)
            self.kl_ref = float(k1.sum() / max(1, valid.sum()))
            if self.params.kl_in == "reward":
                batch = {**batch, "reward": batch["reward"] - self.params.kl_coef * k1}
            columns["ref_logp"] = ref
        adv, ret, value = self.advantages(batch)
        mask = batch["valid"].reshape(-1).astype(bool)
        col = np.broadcast_to(np.arange(N), (T, N)).reshape(-1)

        def flat(x):
            x = np.asarray(x)
            return self.to_device(x.reshape(T * N, *x.shape[2:])[mask])

        return {"obs": flat(batch["obs"]).float(), "action": flat(batch["action"]),
                "logp": flat(batch["logp"]).float(), "value": flat(value).float(),
                "adv": flat(adv), "ret": flat(ret),
                "column": self.to_device(col[mask]),
                **{k: flat(v) for k, v in columns.items()}}

    def kl_term(self, new_logp: torch.Tensor, mb: dict[str, torch.Tensor],
                stats: dict) -> torch.Tensor:
        """`kl_coef` x the KL to the reference (aggregated like the policy loss) when
        it is a loss term; else 0."""
        p = self.params
        if self.ref is None or p.kl_in != "loss":
            return torch.zeros((), device=self.device)
        kl = self.aggregate(kl_estimate(new_logp, mb["ref_logp"], p.kl_estimator), mb)
        stats["losses/kl_ref"] = kl.detach()
        return p.kl_coef * kl

    def loss(self, mb: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        p = self.params
        seq = mb.get("seq")  # each step's episode, where the minibatch says
        d = self.net.dist(mb["obs"], seq)
        new_logp = self.net.log_prob(d, mb["action"])
        adv = mb["adv"]
        if p.normalize_advantage and adv.numel() > 1:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        low, high = self._clip()
        pg, ratio = clipped_surrogate(new_logp, mb["logp"], adv, low, high)
        pg_loss = self.aggregate(pg, mb)
        v = self.net.value(mb["obs"], seq)
        v_loss = (v - mb["ret"]) ** 2
        if p.clip_range_vf > 0:
            v_clip = mb["value"] + (v - mb["value"]).clamp(-p.clip_range_vf, p.clip_range_vf)
            v_loss = torch.max(v_loss, (v_clip - mb["ret"]) ** 2)
        v_loss = 0.5 * v_loss.mean()
        entropy = self.net.entropy(d).mean()
        stats: dict = {}
        loss = pg_loss + p.vf_coef * v_loss - p.ent_coef * entropy + \
            self.kl_term(new_logp, mb, stats)
        with torch.no_grad():
            log_ratio = new_logp - mb["logp"]
            stats |= {"losses/policy_loss": pg_loss, "losses/value_loss": v_loss,
                     "losses/entropy": entropy,
                     "losses/approx_kl": ((ratio - 1) - log_ratio).mean(),
                     "losses/clip_fraction":
                         ((ratio < 1 - low) | (ratio > 1 + high)).float().mean()}
        return loss, stats

    def aggregate(self, per_step: torch.Tensor, mb: dict[str, torch.Tensor]) -> torch.Tensor:
        return per_step.mean()

    def _minibatches(self, n: int, mbs: int) -> list[torch.Tensor]:
        """One epoch's minibatch indices. Reducing gradients with peers, every peer
        takes the same number (the job's batch over its minibatch size) whatever its
        batch holds, so their rounds pair up."""
        perm = torch.randperm(n, device=self.device)
        if self.reduce_grads is not None:  # (n varies: steps after an episode's end are void)
            p = self.params
            k = ceil_div(p.batch_size, p.minibatch_size)
            return list(torch.tensor_split(perm, max(1, min(n, k))))
        return [perm[s:s + mbs] for s in range(0, n - mbs + 1, mbs)]

    def learn(self, batch, at: Progress = START):
        p = self.params
        fraction = at.fraction
        if self.reduce_grads is not None:  # the group's progress: one schedule for all
            fraction = self.reduce_grads(None, {"fraction": fraction})["fraction"]
        self.progress = fraction
        for g in self.opt.param_groups:
            g["lr"] = self._schedule(p.learning_rate, p.lr_schedule)
        data = self.prepare(batch)
        n = data["obs"].shape[0]
        mbs = max(1, min(p.minibatch_size, n))
        sums: dict[str, torch.Tensor | float] = {}
        count = 0
        stop = False
        params = list(self.net.parameters())
        for _ in range(p.n_epochs):
            for idx in self._minibatches(n, mbs):
                mb = {k: v[idx] for k, v in data.items()}
                with self.autocast():
                    loss, stats = self.loss(mb)
                    bc = self.bc_batch(at.env_steps)
                    if bc is not None:  # behaviour cloning: -log pi(a_demo | s_demo)
                        w, obs, act = bc
                        d = self.net.dist(obs)
                        bc_loss = -self.net.log_prob(d, act if self.spec.discrete
                                                     else act.float()).mean()
                        loss = loss + w * bc_loss
                        stats["losses/bc_loss"] = bc_loss.detach()
                        stats["charts/bc_weight"] = w
                self.opt.zero_grad(set_to_none=True)
                loss.backward()
                if self.reduce_grads is not None:  # the group's gradient, and its KL
                    kl = float(stats["losses/approx_kl"])
                    stats["losses/approx_kl"] = self.reduce_grads(
                        params, {"approx_kl": kl})["approx_kl"]
                gn = clip_grad_norm(params, p.max_grad_norm)
                self.opt.step()
                stats["losses/grad_norm"] = gn
                for k, v in stats.items():  # tensors summed: one float each after the update
                    v = v.detach() if torch.is_tensor(v) else v
                    sums[k] = sums[k] + v if k in sums else v
                count += 1
                if p.target_kl and float(stats["losses/approx_kl"]) > 1.5 * p.target_kl:
                    stop = True
                    break
            if stop:
                break
        self.updates += 1
        out = {k: float(v) / max(count, 1) for k, v in sums.items()}
        y, pred = data["ret"], data["value"]
        var = float(y.var()) if y.numel() > 1 else 0.0
        out["losses/explained_variance"] = (1 - float((y - pred).var()) / var) if var > 0 else 0.0
        # the critic's spread against its targets': about 0 when it answers one constant
        out["losses/value_spread"] = float(pred.std()) / var ** 0.5 if var > 0 else 1.0
        out["charts/learning_rate"] = self.opt.param_groups[0]["lr"]
        out["charts/clip_range"] = self._clip()[1]
        out["charts/batch_steps"] = float(n)
        if self.ref is not None:
            out["charts/kl_ref"] = self.kl_ref
        return Learned(out)


ALGORITHM = PPO
