"""Exploration and actor-side priorities that the torch algorithms and the
samplers' numpy actors share (numpy only)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from ..importing import plug_in
from ..replay.transitions import after, windows

SCHEDULE = "(env_steps, worker_index, num_workers) -> epsilon"


@functools.cache
def schedule(path: str) -> Callable[[int, int, int], float]:
    """`algorithm.params.exploration = "module:function"`: an epsilon schedule of
    one's own (imported once, where the sampler acts: numpy-only is best)."""
    fn: Callable[[int, int, int], float] = plug_in(path, "algorithm.params.exploration", 3,
                                                    SCHEDULE)
    return fn


def epsilon(params: Any, worker_index: int, num_workers: int, env_steps: int) -> float:
    """DQN's epsilon: 1 (uniform random actions) for the job's first
    `learning_starts` env steps, as Stable-Baselines3's DQN acts; then Ape-X's
    per-sampler constant eps^(1 + alpha i / (n - 1)), or annealed linearly from
    eps_start to eps_end over eps_decay_steps env steps."""
    p = params
    if env_steps < p.learning_starts:
        return 1.0
    if ":" in p.exploration:  # a schedule of one's own
        return float(schedule(p.exploration)(env_steps, worker_index, num_workers))
    if p.exploration == "apex":
        i, n = worker_index, num_workers
        return float(p.apex_eps ** (1 + p.apex_alpha * i / (n - 1)) if n > 1 else p.apex_eps)
    frac = min(1.0, env_steps / max(1, p.eps_decay_steps))
    return float(p.eps_start + frac * (p.eps_end - p.eps_start))


def apex_priorities(arrays: dict[str, np.ndarray], gamma: float, n_step: int) -> np.ndarray:
    """Ape-X: each step's initial priority |n-step TD error| from the Q-values
    recorded while acting, so new transitions need no extra forward pass."""
    ti, ei, ki, ret, disc = windows(arrays, gamma, n_step)
    td = ret + disc * after(arrays, "q_max")[ki, ei] - arrays["q_taken"][ti, ei]
    prio = np.zeros(arrays["reward"].shape, np.float32)
    prio[ti, ei] = np.abs(td)
    return prio


def epsilon_greedy(q: np.ndarray, eps: float, rng: np.random.Generator | None,
                   legal: np.ndarray | None = None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Greedy actions from Q-values [N, A], each replaced by a uniform one with
    probability `eps` (no `rng`: greedy), and the extras DQN records (Ape-X).
    With `legal` [N, A] (an action mask) both the greedy and the uniform action
    are legal ones, and `q_max` is over legal actions."""
    if legal is not None:
        legal = legal | ~legal.any(-1, keepdims=True)  # a row with none: all
        q = np.where(legal, q, np.float32(-np.inf))
    a = q.argmax(-1)
    if rng is not None:
        explore = rng.random(len(a)) < eps
        if legal is None:
            other = rng.integers(0, q.shape[1], len(a))
        else:  # uniform over each row's legal actions: inverse CDF of the counts
            cum = legal.cumsum(-1)
            pick = (rng.random(len(a)) * cum[:, -1]).astype(np.int64)
            other = (cum <= pick[:, None]).sum(-1)
        a = np.where(explore, other, a)
    return a.astype(np.int64), {"q_taken": q[np.arange(len(a)), a].astype(np.float32),
                                "q_max": q.max(-1).astype(np.float32)}


class ActionNoise:
    """Unit Gaussian noise for each env's action, white or correlated in time.

    `beta` is the exponent of the noise's power spectrum 1/f^beta: 0 is white
    (independent each step), 1 pink, 2 red (a random walk's). Pink noise lets a
    squashed-Gaussian policy wander far in one direction for many steps, what
    tasks with a distant goal and a cost for acting need (MountainCarContinuous),
    while each step's marginal stays N(0, 1), so SAC's sampled actions keep the
    distribution the policy's log-probabilities describe (Eberhard et al. 2023,
    "Pink noise is all you need"). Correlated noise is drawn per env and action
    dimension in blocks of `horizon` steps, each block independent.
    """

    def __init__(self, beta: float, horizon: int, rng: np.random.Generator):
        self.beta, self.horizon, self.rng = beta, max(2, horizon), rng
        self.block: np.ndarray | None = None  # [horizon, *shape]
        self.t = 0

    def __call__(self, shape: tuple[int, ...]) -> np.ndarray:
        if self.beta == 0:
            return np.asarray(self.rng.standard_normal(shape))
        if self.block is None or self.block.shape[1:] != shape or self.t == self.horizon:
            self.block = colored_gaussian(self.beta, self.horizon, shape, self.rng)
            self.t = 0
        self.t += 1
        out: np.ndarray = self.block[self.t - 1]
        return out

    def warmup(self, shape: tuple[int, ...]) -> np.ndarray:
        """Actions in [-1, 1] before learning starts: uniform for white noise; for
        coloured noise tanh of the same noise process the policy will act with,
        so the warm-up already travels. (MountainCarContinuous from rest: uniform
        steps reached the goal in 0 of 40 episodes, tanh of pink noise in 24.)"""
        if self.beta == 0:
            return np.asarray(self.rng.uniform(-1, 1, shape), np.float32)
        return np.asarray(np.tanh(self(shape)), np.float32)


def colored_gaussian(beta: float, n: int, shape: tuple[int, ...],
                     rng: np.random.Generator) -> np.ndarray:
    """[n, *shape] Gaussian sequences with power spectrum 1/f^beta, each step's
    variance 1 in expectation: random Fourier coefficients scaled by
    f^(-beta/2), inverted (the spectrum's lowest frequency is 1/n)."""
    f = np.fft.rfftfreq(n)
    f[0] = 1.0 / n
    scale = f ** (-beta / 2.0)
    re = rng.standard_normal((*shape, len(f))) * scale
    im = rng.standard_normal((*shape, len(f))) * scale
    im[..., 0] = 0.0  # the mean and (even n) the Nyquist term are real
    re[..., 0] *= np.sqrt(2.0)
    if n % 2 == 0:
        im[..., -1] = 0.0
        re[..., -1] *= np.sqrt(2.0)
    # each step's variance: (2 s_0^2 + 4 sum of the middle s_k^2 + 2 s_nyquist^2) / n^2
    middle = scale[1:-1] if n % 2 == 0 else scale[1:]
    last = scale[-1] ** 2 if n % 2 == 0 else 0.0
    sigma = np.sqrt(2 * scale[0] ** 2 + 4 * np.sum(middle ** 2) + 2 * last) / n
    y = np.fft.irfft(re + 1j * im, n=n, axis=-1) / sigma
    return np.moveaxis(y, -1, 0)
