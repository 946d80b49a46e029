"""Exploration and actor-side priorities that the torch algorithms and the
samplers' numpy actors share (numpy only)."""

from __future__ import annotations

import numpy as np

from ..replay.transitions import after, windows


def epsilon(params, worker_index: int, num_workers: int, env_steps: int) -> float:
    """DQN's epsilon: Ape-X's per-sampler constant eps^(1 + alpha i / (n - 1)), or
    annealed linearly from eps_start to eps_end over eps_decay_steps env steps."""
    p = params
    if p.exploration == "apex":
        i, n = worker_index, num_workers
        return p.apex_eps ** (1 + p.apex_alpha * i / (n - 1)) if n > 1 else p.apex_eps
    frac = min(1.0, env_steps / max(1, p.eps_decay_steps))
    return p.eps_start + frac * (p.eps_end - p.eps_start)


def apex_priorities(arrays: dict[str, np.ndarray], gamma: float, n_step: int) -> np.ndarray:
    """Ape-X: each step's initial priority |n-step TD error| from the Q-values
    recorded while acting, so new transitions need no extra forward pass."""
    ti, ei, ki, ret, disc = windows(arrays, gamma, n_step)
    td = ret + disc * after(arrays, "q_max")[ki, ei] - arrays["q_taken"][ti, ei]
    prio = np.zeros(arrays["reward"].shape, np.float32)
    prio[ti, ei] = np.abs(td)
    return prio


def epsilon_greedy(q: np.ndarray, eps: float, rng: np.random.Generator | None
                   ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Greedy actions from Q-values [N, A], each replaced by a uniform one with
    probability `eps` (no `rng`: greedy), and the extras DQN records (Ape-X)."""
    a = q.argmax(-1)
    if rng is not None:
        explore = rng.random(len(a)) < eps
        a = np.where(explore, rng.integers(0, q.shape[1], len(a)), a)
    return a.astype(np.int64), {"q_taken": q[np.arange(len(a)), a].astype(np.float32),
                                "q_max": q.max(-1).astype(np.float32)}
