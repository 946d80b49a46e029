"""What a sampler (or the evaluator) needs of its policy copy: the `Actor`
protocol. `actors.NumpyActor` (the built-in MLPs, torch-free) and every torch
algorithm (`algos.base.Algorithm`) implement it; `actors.make_actor` picks one."""

from __future__ import annotations

from typing import Protocol

import numpy as np


class Actor(Protocol):
    """A policy copy that acts: actions and the per-step extras fragments record
    (`extras`: their names), what the env receives, the weights a params message
    carries, and what a finished fragment adds (DQN's Ape-X priorities)."""

    @property
    def extras(self) -> tuple[str, ...]: ...

    def act(self, obs: np.ndarray, deterministic: bool = False, env_steps: int = 0
            ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Actions for a batch of observations, and the extras of each step."""

    def env_action(self, action: np.ndarray) -> np.ndarray:
        """What the env receives for `action` (continuous actions clipped or rescaled)."""

    def load_policy_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        """Take published params; ValueError when names or shapes do not fit."""

    def finish_fragment(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Columns a finished fragment adds (may be none)."""
