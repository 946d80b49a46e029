"""DQN (Mnih et al. 2015) with double-DQN targets (van Hasselt et al. 2016), an
optional dueling head (Wang et al. 2016), n-step returns (computed by the replay
shard), Huber loss weighted by prioritised-replay importance weights, and a
target network updated by period (tau = 1) or Polyak averaging (tau < 1).

Samplers explore epsilon-greedily: one epsilon annealed linearly over env steps,
or Ape-X's per-sampler constants eps_i = eps^(1 + alpha * i / (N - 1)).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..config import DQNParams, Job, Policy
from ..envs.spaces import features
from ..envs.spec import EnvSpec
from ..policy.nets import mlp, obs_dim
from .base import (
    START,
    Algorithm,
    Learned,
    Progress,
    adam,
    clip_grad_norm,
    scheduled,
    step_if_finite,
)
from .exploration import apex_priorities, epsilon, epsilon_greedy


class QNet(nn.Module):
    """Q-values for every action; dueling: V(s) + A(s, a) - mean_a A(s, a). With
    `policy.encoder` (image observations) a convolutional encoder comes first and
    the MLP takes its features."""

    def __init__(self, spec: EnvSpec, policy: Policy):
        super().__init__()
        self.dueling = policy.dueling
        n = obs_dim(spec)
        self.enc: nn.Module | None = None
        if policy.encoder != "mlp":
            from ..policy.cnn import encoder

            self.enc, n = encoder(policy.encoder, tuple(spec.obs_shape))
        if self.dueling:
            self.trunk = mlp(n, policy.hidden_sizes[:-1], policy.hidden_sizes[-1],
                             policy.activation)
            self.act = nn.ReLU() if policy.activation == "relu" else nn.Tanh()
            self.value = nn.Linear(policy.hidden_sizes[-1], 1)
            self.adv = nn.Linear(policy.hidden_sizes[-1], spec.n_actions)
        else:
            self.q = mlp(n, policy.hidden_sizes, spec.n_actions, policy.activation)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = self.enc(obs) if self.enc is not None else obs.flatten(1)
        if not self.dueling:
            q: torch.Tensor = self.q(x)
            return q
        h = self.act(self.trunk(x))
        a = self.adv(h)
        out: torch.Tensor = self.value(h) + a - a.mean(-1, keepdim=True)
        return out


def legal_of(spec: EnvSpec, x: torch.Tensor) -> torch.Tensor | None:
    """The legal actions [B, A] read from flat features (the mask leaf's slice; a
    row with none legal: all), or None where the env has no mask."""
    at = spec.mask_slice
    if at is None:
        return None
    legal = x[:, at[0]:at[1]] > 0.5
    return legal | ~legal.any(-1, keepdim=True)


def double_dqn_target(q_next_online: torch.Tensor, q_next_target: torch.Tensor,
                      reward: torch.Tensor, discount: torch.Tensor,
                      legal: torch.Tensor | None = None) -> torch.Tensor:
    """r + discount * Q_target(s', argmax_a Q_online(s', a)), the argmax over the
    actions legal in s' where the env masks them; discount holds gamma^n or 0."""
    if legal is not None:
        q_next_online = q_next_online.masked_fill(~legal, float("-inf"))
    best = q_next_online.argmax(-1, keepdim=True)
    out: torch.Tensor = reward + discount * q_next_target.gather(-1, best).squeeze(-1)
    return out


class DQN(Algorithm[DQNParams]):
    """Double DQN with optional dueling head, for Discrete actions."""

    name = "dqn"
    state_attrs = ("q", "target", "opt")

    def __init__(self, job: Job, spec: EnvSpec, device: str = "cpu", **kw: Any):
        super().__init__(job, spec, device, **kw)
        self.q = QNet(spec, job.algorithm.policy).to(self.device)
        self.init_policy()
        self.target = copy.deepcopy(self.q).requires_grad_(False)
        self.opt = adam(self.q.parameters(), self.params.learning_rate)

    def policy_module(self) -> torch.nn.Module:
        return self.q

    def export_head(self) -> tuple[torch.nn.Module, str]:
        return self.q, "argmax"

    def epsilon(self, env_steps: int = 0) -> float:
        return epsilon(self.params, self.worker_index, self.num_workers, env_steps)

    def act(self, obs: np.ndarray, deterministic: bool = False,
            env_steps: int = 0, state: Any = None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        if self.spec.structured:  # the networks read the flat features
            obs = features(obs, self.spec.leaves)
        with torch.no_grad():
            x = torch.as_tensor(obs, dtype=torch.float32, device=self.device)
            q = self.q(x)
            legal = legal_of(self.spec, x)
        return epsilon_greedy(q.cpu().numpy(), self.epsilon(env_steps),
                              None if deterministic else self.rng,
                              None if legal is None else legal.cpu().numpy())

    def finish_fragment(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Ape-X initial priorities from the Q-values recorded while acting."""
        return {"priority": apex_priorities(arrays, self.params.gamma, self.params.n_step)}

    def learn(self, batch: Mapping[str, np.ndarray], at: Progress = START) -> Learned:
        p = self.params
        lr = scheduled(p.learning_rate, p.lr_schedule, at.fraction)
        for g in self.opt.param_groups:
            g["lr"] = lr
        t = {k: self.to_device(batch[k])
             for k in ("obs", "action", "reward", "next_obs", "discount", "weight")}
        with self.autocast():
            with torch.no_grad():
                nxt = t["next_obs"].float()
                target = double_dqn_target(self.q(nxt), self.target(nxt), t["reward"].float(),
                                           t["discount"].float(),
                                           legal_of(self.spec, nxt)).float()
            q = self.q(t["obs"].float()).gather(-1, t["action"].long()[:, None]).squeeze(-1)
            q = q.float()
            td = q - target
            loss = (t["weight"].float() * F.smooth_l1_loss(q, target, reduction="none")).mean()
        self.opt.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        params: list[torch.Tensor] = list(self.q.parameters())
        if self.reduce_grads is not None:  # data-parallel ranks: the group's gradient
            self.reduce_grads(params, {})
        gn = clip_grad_norm(params, p.max_grad_norm)
        step_if_finite(self.opt, gn)
        self.updates += 1
        if p.tau < 1.0:
            with torch.no_grad():
                for tp, sp in zip(self.target.parameters(), self.q.parameters()):
                    tp.lerp_(sp, p.tau)
        elif self.updates % p.target_update_interval == 0:
            self.target.load_state_dict(self.q.state_dict())
        prio = td.detach().abs().cpu().numpy()
        return Learned({"losses/td_loss": float(loss.detach()),
                        "losses/q_mean": float(q.mean().detach()),
                        "losses/td_abs_mean": float(prio.mean()),
                        "losses/grad_norm": float(gn), "charts/learning_rate": lr}, prio)


ALGORITHM = DQN
