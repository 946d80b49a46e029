"""SAC (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications"):
twin Q networks with Polyak-averaged targets, a tanh-squashed Gaussian policy,
and automatic entropy tuning towards `target_entropy` (default -dim(action)).
Actions live in [-1, 1] inside the algorithm and are rescaled to the env's Box.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..config import Job, Policy, SACParams
from ..envs.spaces import features
from ..envs.spec import EnvSpec
from ..policy.nets import mlp, obs_dim
from .base import START, Algorithm, Learned, Progress, adam, grad_norm, step_if_finite
from .exploration import ActionNoise

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


def _features(spec: EnvSpec, policy: Policy) -> tuple[nn.Module | None, int]:
    """(a convolutional encoder or None, the size of what the MLP takes): the actor
    and the critic each have their own encoder (`policy.encoder`)."""
    if policy.encoder == "mlp":
        return None, obs_dim(spec)
    from ..policy.cnn import encoder

    return encoder(policy.encoder, tuple(spec.obs_shape))


def _embed(enc: nn.Module | None, obs: torch.Tensor) -> torch.Tensor:
    """What the MLP takes: the encoder's features, or the flattened observations."""
    out: torch.Tensor = enc(obs) if enc is not None else obs.flatten(1)
    return out


class SquashedGaussian(nn.Module):
    """pi(a|s): tanh(N(mu(s), sigma(s))) with the log-probability of the squashed sample."""

    def __init__(self, spec: EnvSpec, policy: Policy):
        super().__init__()
        self.enc, n = _features(spec, policy)
        self.net = mlp(n, policy.hidden_sizes, 2 * spec.n_actions, "relu")

    def forward(self, obs: torch.Tensor, deterministic: bool = False,
                noise: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(squashed action, its log-probability); `noise`: the unit Gaussian sample
        to use (correlated acting noise) instead of a fresh one."""
        mu, log_std = self.net(_embed(self.enc, obs)).chunk(2, -1)
        log_std = log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)
        eps = torch.randn_like(mu) if noise is None else noise
        u = mu if deterministic else mu + log_std.exp() * eps
        a = torch.tanh(u)
        # log N(u) - sum log(1 - tanh(u)^2), the latter in a stable form
        logp = (-0.5 * ((u - mu) / log_std.exp()) ** 2 - log_std - 0.5 * math.log(2 * math.pi)
                ).sum(-1)
        logp = logp - (2 * (math.log(2) - u - F.softplus(-2 * u))).sum(-1)
        return a, logp

    def log_prob_of(self, obs: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """log pi(a | obs) of given squashed actions a in (-1, 1) (demonstrations)."""
        mu, log_std = self.net(_embed(self.enc, obs)).chunk(2, -1)
        log_std = log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)
        a = a.clamp(-1 + 1e-6, 1 - 1e-6)
        u = torch.atanh(a)
        logp = (-0.5 * ((u - mu) / log_std.exp()) ** 2 - log_std
                - 0.5 * math.log(2 * math.pi)).sum(-1)
        out: torch.Tensor = logp - (2 * (math.log(2) - u - F.softplus(-2 * u))).sum(-1)
        return out


class TwinQ(nn.Module):
    """Two Q(s, a) heads; with image observations they share one encoder."""

    def __init__(self, spec: EnvSpec, policy: Policy):
        super().__init__()
        self.enc, n = _features(spec, policy)
        self.q1 = mlp(n + spec.n_actions, policy.hidden_sizes, 1, "relu")
        self.q2 = mlp(n + spec.n_actions, policy.hidden_sizes, 1, "relu")

    def forward(self, obs: torch.Tensor, act: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.cat([_embed(self.enc, obs), act], -1)
        return self.q1(x).squeeze(-1), self.q2(x).squeeze(-1)


def sac_target(q1_next: torch.Tensor, q2_next: torch.Tensor, logp_next: torch.Tensor,
               alpha: float, reward: torch.Tensor, discount: torch.Tensor) -> torch.Tensor:
    """r + discount * (min(Q1', Q2') - alpha * log pi(a'|s')); discount holds gamma^n or 0."""
    return reward + discount * (torch.min(q1_next, q2_next) - alpha * logp_next)


class SAC(Algorithm[SACParams]):
    """Soft actor-critic for 1-d Box actions."""

    name = "sac"
    state_attrs = ("actor", "critic", "critic_target", "log_alpha", "pi_opt", "q_opt",
                   "a_opt")

    def __init__(self, job: Job, spec: EnvSpec, device: str = "cpu", **kw: Any):
        super().__init__(job, spec, device, **kw)
        pol = job.algorithm.policy
        p = self.params
        self.actor = SquashedGaussian(spec, pol).to(self.device)
        self.init_policy()
        self.critic = TwinQ(spec, pol).to(self.device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self._target_params: list[torch.Tensor] = list(self.critic_target.parameters())
        self._critic_params: list[torch.Tensor] = list(self.critic.parameters())
        self._actor_params: list[torch.Tensor] = list(self.actor.parameters())
        self.pi_opt = adam(self.actor.parameters(), p.learning_rate)
        self.q_opt = adam(self.critic.parameters(), p.learning_rate)
        self.log_alpha = torch.tensor(math.log(p.init_alpha), device=self.device,
                                      requires_grad=True)
        self.a_opt = adam([self.log_alpha], p.learning_rate)
        self.target_entropy = p.target_entropy or -float(spec.n_actions)
        self.noise = ActionNoise(p.noise_beta, p.noise_horizon, self.rng)
        self.low = np.array(spec.action_low, np.float32)
        self.high = np.array(spec.action_high, np.float32)

    def _reduce(self, params: Sequence[torch.Tensor]) -> None:
        """Data-parallel ranks: the group's mean gradient in place of ours."""
        if self.reduce_grads is not None:
            self.reduce_grads(params, {})

    def policy_module(self) -> torch.nn.Module:
        return self.actor

    def export_head(self) -> tuple[torch.nn.Module, str]:
        return self.actor.net, "squash"

    def act(self, obs: np.ndarray, deterministic: bool = False,
            env_steps: int = 0, state: Any = None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        p = self.params
        if self.spec.structured:  # the networks read the flat features
            obs = features(obs, self.spec.leaves)
        if not deterministic and env_steps < p.learning_starts:
            return self.noise.warmup((len(obs), self.spec.n_actions)), {}
        noise = None
        if not deterministic and p.noise_beta:
            noise = torch.as_tensor(self.noise((len(obs), self.spec.n_actions)),
                                    dtype=torch.float32, device=self.device)
        with torch.no_grad():
            a, _ = self.actor(torch.as_tensor(obs, dtype=torch.float32, device=self.device),
                              deterministic, noise)
        return np.asarray(a.cpu().numpy(), np.float32), {}

    def env_action(self, action: np.ndarray) -> np.ndarray:
        out: np.ndarray = self.low + (np.clip(action, -1, 1) + 1.0) * 0.5 * (self.high - self.low)
        return out

    def learn(self, batch: Mapping[str, np.ndarray], at: Progress = START) -> Learned:
        p = self.params
        t = {k: self.to_device(batch[k]).float()
             for k in ("obs", "action", "reward", "next_obs", "discount", "weight")}
        alpha = float(self.log_alpha.detach().exp())
        with self.autocast():
            with torch.no_grad():
                a2, logp2 = self.actor(t["next_obs"])
                q1n, q2n = self.critic_target(t["next_obs"], a2)
                y = sac_target(q1n, q2n, logp2, alpha, t["reward"], t["discount"]).float()
            q1, q2 = self.critic(t["obs"], t["action"])
            q1, q2 = q1.float(), q2.float()
            w = t["weight"]
            q_loss = 0.5 * (w * ((q1 - y) ** 2 + (q2 - y) ** 2)).mean()
        self.q_opt.zero_grad(set_to_none=True)
        q_loss.backward()
        self._reduce(self._critic_params)
        step_if_finite(self.q_opt, grad_norm(self._critic_params))
        with self.autocast():
            a, logp = self.actor(t["obs"])
            # the actor's loss needs gradients through Q to the action, not Q's weights
            self.critic.requires_grad_(False)
            q1p, q2p = self.critic(t["obs"], a)
            self.critic.requires_grad_(True)
            logp = logp.float()
            pi_loss = (alpha * logp - torch.min(q1p, q2p).float()).mean()
        out: dict[str, float] = {}
        bc = self.bc_batch(at.env_steps)
        if bc is not None:  # behaviour cloning: -log pi(a_demo | s_demo), squashed
            bc_w, obs, act = bc
            low = torch.as_tensor(self.low, device=self.device)
            high = torch.as_tensor(self.high, device=self.device)
            bc_loss = -self.actor.log_prob_of(obs, 2 * (act.float() - low) / (high - low) - 1
                                              ).mean()
            pi_loss = pi_loss + bc_w * bc_loss
            out = {"losses/bc_loss": float(bc_loss.detach()), "charts/bc_weight": bc_w}
        self.pi_opt.zero_grad(set_to_none=True)
        pi_loss.backward()
        self._reduce(self._actor_params)
        step_if_finite(self.pi_opt, grad_norm(self._actor_params))
        if p.autotune_alpha:
            a_loss = -(self.log_alpha * (logp.detach() + self.target_entropy)).mean()
            self.a_opt.zero_grad(set_to_none=True)
            a_loss.backward()
            self._reduce([self.log_alpha])
            step_if_finite(self.a_opt, grad_norm([self.log_alpha]))
        with torch.no_grad():
            torch._foreach_lerp_(self._target_params, self._critic_params, p.tau)
        self.updates += 1
        prio = (0.5 * ((q1 - y).abs() + (q2 - y).abs())).detach().cpu().numpy()
        return Learned({"losses/q_loss": float(q_loss.detach()),
                        "losses/pi_loss": float(pi_loss.detach()), "losses/alpha": alpha,
                        "losses/entropy": float(-logp.detach().mean()), **out}, prio)


ALGORITHM = SAC
