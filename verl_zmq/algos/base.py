"""The algorithm contract. Roles call only this; algorithms know no sockets.

- `act(obs)` (samplers, evaluator): actions for a batch of observations plus
  the per-step extras the algorithm wants recorded in fragments.
- `learn(batch)` (learner): one update from a batch; returns metrics.
- `policy_arrays()` / `load_policy_arrays()`: what travels in a params message.
- `state_dict()` / `load_state_dict()`: everything a checkpoint holds.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np
import torch

from ..config import Job
from ..envs import EnvSpec


class Algorithm(ABC):
    """One RL algorithm: networks, acting, learning, state."""

    name: ClassVar[str]
    on_policy: ClassVar[bool]
    extras: ClassVar[tuple[str, ...]] = ()
    # attributes a checkpoint holds: modules and optimisers (state_dict), or tensors
    state_attrs: ClassVar[tuple[str, ...]] = ()

    def __init__(self, job: Job, spec: EnvSpec, device: str = "cpu"):
        self.job = job
        self.spec = spec
        self.params = job.algorithm.params
        self.device = torch.device(device)
        self.updates = 0
        self.progress = 0.0  # env steps / total_timesteps, set by the learner
        # set by samplers: exploration schedules (Ape-X epsilons, annealing) read them
        self.worker_index, self.num_workers = 0, 1
        self.sampler_env_steps = 0
        # off-policy: |TD error| of the last learned batch, for priority updates
        self.priorities: np.ndarray | None = None
        # learning from demonstrations: set by the learner (env steps, obs normalisation)
        self.env_steps = 0
        self.obs_transform = None  # raw observations -> what the networks take
        self._bc = None

    def bc_batch(self) -> tuple[float, torch.Tensor, torch.Tensor] | None:
        """(weight, obs, action) of a demonstration batch when behaviour cloning is on
        and its weight is not zero yet. Demonstrations are loaded at the first call,
        so only the learner (never a sampler) reads the file."""
        cfg = self.job.algorithm.bc
        if not cfg.demos or cfg.mixing_ratio <= 0:
            return None
        if self._bc is None:
            from ..demos import BCTerm

            self._bc = BCTerm(cfg, self.spec, self.job.experiment.seed)
        w = self._bc.weight(self.env_steps)
        if w <= 0:
            return None
        obs, act = self._bc.batch()
        if self.obs_transform is not None:
            obs = self.obs_transform(obs)
        return (w, torch.as_tensor(obs, dtype=torch.float32, device=self.device),
                torch.as_tensor(act, device=self.device))

    @abstractmethod
    def act(self, obs: np.ndarray, deterministic: bool = False
            ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Actions for a batch of observations, and the extras to record."""

    def env_action(self, action: np.ndarray) -> np.ndarray:
        """What the env receives for a recorded action (e.g. clipped to bounds)."""
        return action

    def finish_fragment(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Samplers: arrays to add to a finished fragment (e.g. initial priorities)."""
        return {}

    @abstractmethod
    def learn(self, batch: dict[str, np.ndarray]) -> dict[str, float]:
        """One update; returns `losses/...` metrics."""

    def export_head(self) -> tuple[torch.nn.Module, str]:
        """For export: a module from flat normalised obs to its output, and how that
        output becomes the deterministic env action: "argmax" (logits or Q-values),
        "clip" (a Gaussian mean, clipped to the bounds) or "squash" (the first half
        is a pre-tanh mean, scaled to the bounds)."""
        raise NotImplementedError(f"{type(self).__name__} cannot be exported")

    @abstractmethod
    def policy_module(self) -> torch.nn.Module:
        """The module whose parameters samplers and the evaluator need."""

    def policy_arrays(self) -> dict[str, np.ndarray]:
        return {k: v.detach().cpu().numpy() for k, v in self.policy_module().state_dict().items()}

    def load_policy_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        """Load published params; raises ValueError when names or shapes do not fit."""
        mod = self.policy_module()
        own = mod.state_dict()
        missing = [k for k in own if k not in arrays]
        if missing:
            raise ValueError(f"params lack {missing[:3]}")
        for k, v in own.items():
            if tuple(arrays[k].shape) != tuple(v.shape):
                raise ValueError(f"params {k}: shape {arrays[k].shape} != {tuple(v.shape)}")
        with torch.no_grad():
            for k, v in own.items():
                v.copy_(torch.from_numpy(np.array(arrays[k], dtype=np.float32)))

    def state_dict(self) -> dict:
        out: dict = {"updates": self.updates}
        for name in self.state_attrs:
            obj = getattr(self, name)
            out[name] = obj.detach().clone() if torch.is_tensor(obj) else obj.state_dict()
        return out

    def load_state_dict(self, state: dict) -> None:
        self.updates = int(state.get("updates", 0))
        for name in self.state_attrs:
            obj = getattr(self, name)
            if torch.is_tensor(obj):
                with torch.no_grad():
                    obj.copy_(state[name])
            else:
                obj.load_state_dict(state[name])
