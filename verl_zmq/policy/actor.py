"""What a sampler (or the evaluator) needs of its policy copy: the `Actor`
protocol. `actors.NumpyActor` (the built-in MLPs, torch-free) and every torch
algorithm (`algos.base.Algorithm`) implement it; `actors.make_actor` picks one."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

# a recurrent policy's state per env [E, S] and which envs start an episode [E]
State = tuple[np.ndarray, np.ndarray]


class Actor(Protocol):
    """A policy copy that acts: actions and the per-step extras fragments record
    (`extras`: their names), what the env receives, the weights a params message
    carries, and what a finished fragment adds (DQN's Ape-X priorities)."""

    @property
    def extras(self) -> tuple[str, ...]: ...

    state_size: int  # a recurrent policy's state per env; 0: not recurrent
    spec: Any  # the env's spaces (envs.make.EnvSpec)

    def act(self, obs: np.ndarray, deterministic: bool = False, env_steps: int = 0,
            state: State | None = None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Actions for a batch of observations, and the extras of each step. A
        recurrent policy takes its `state` (zeroed where an episode starts; None:
        all start) and returns the next one as the extra `rnn_state`."""

    def env_action(self, action: np.ndarray) -> np.ndarray:
        """What the env receives for `action` (continuous actions clipped or rescaled)."""

    def load_policy_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        """Take published params; ValueError when names or shapes do not fit."""

    def finish_fragment(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Columns a finished fragment adds (may be none)."""
