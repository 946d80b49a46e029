"""Version-0 weights of the built-in MLP policies, made in numpy from the job seed.

The torch algorithms load these into their policy modules when they are built,
and a numpy sampler builds the same arrays itself, so every process of a job
starts from one identical policy without torch and without waiting for the
learner's first params: a sampler steps its envs about a second after it
starts. The initialisers are torch's (`nn.init.orthogonal_` with the gains the
networks use, `nn.Linear`'s default uniform), drawn from a numpy generator.
Names and shapes are the torch modules' `state_dict` keys
(`tests/test_actors.py` checks they match for every built-in policy).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..envs.spec import EnvSpec

Arrays = dict[str, np.ndarray]


def orthogonal(rng: np.random.Generator, rows: int, cols: int, gain: float) -> np.ndarray:
    """torch.nn.init.orthogonal_: QR of a normal matrix, signs fixed by R's diagonal."""
    flat = rng.standard_normal((rows, cols))
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q *= np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    return (gain * q).astype(np.float32)


def mlp_arrays(rng: np.random.Generator, prefix: str, n_in: int, hidden: list[int], n_out: int,
               out_gain: float = 1.0) -> Arrays:
    """`nets.mlp`'s init: orthogonal (sqrt 2 inside, `out_gain` last), zero biases;
    Linear layers sit at the even indices of the Sequential."""
    out: Arrays = {}
    sizes = [n_in, *hidden, n_out]
    for i in range(len(sizes) - 1):
        gain = out_gain if i == len(sizes) - 2 else math.sqrt(2)
        out[f"{prefix}.{2 * i}.weight"] = orthogonal(rng, sizes[i + 1], sizes[i], gain)
        out[f"{prefix}.{2 * i}.bias"] = np.zeros(sizes[i + 1], np.float32)
    return out


def linear_default(rng: np.random.Generator, prefix: str, n_in: int, n_out: int) -> Arrays:
    """nn.Linear's default init: weight and bias uniform in +-1/sqrt(fan_in)."""
    b = 1.0 / math.sqrt(n_in)
    return {f"{prefix}.weight": rng.uniform(-b, b, (n_out, n_in)).astype(np.float32),
            f"{prefix}.bias": rng.uniform(-b, b, n_out).astype(np.float32)}


def recurrent_arrays(rng: np.random.Generator, pol: Any, n_in: int, n_out: int) -> Arrays:
    """`recurrent.RecurrentActorCritic`'s init: the MLP's as `mlp_arrays`, the core's
    as torch's LSTMCell/GRUCell (uniform in +-1/sqrt(size)), orthogonal heads."""
    hidden, size = list(pol.hidden_sizes), pol.recurrent_size
    gates = (4 if pol.recurrent == "lstm" else 3) * size
    b = 1.0 / math.sqrt(size)
    out = mlp_arrays(rng, "enc", n_in, hidden[:-1], hidden[-1], math.sqrt(2))
    for name, shape in (("weight_ih", (gates, hidden[-1])), ("weight_hh", (gates, size)),
                        ("bias_ih", (gates,)), ("bias_hh", (gates,))):
        out[f"core.{name}"] = rng.uniform(-b, b, shape).astype(np.float32)
    out["pi.weight"] = orthogonal(rng, n_out, size, 0.01)
    out["pi.bias"] = np.zeros(n_out, np.float32)
    out["v.weight"] = orthogonal(rng, 1, size, 1.0)
    out["v.bias"] = np.zeros(1, np.float32)
    return out


def initial_policy_arrays(job: Any, spec: EnvSpec) -> Arrays:
    """The policy's version-0 arrays for the job's numpy-actor kind ("pg", "q",
    "squashed"), from the job seed alone."""
    kind = job.traits.numpy_actor
    pol = job.algorithm.policy
    rng = np.random.default_rng([job.experiment.seed, 0x1417])
    n = int(np.prod(spec.obs_shape))
    hidden = list(pol.hidden_sizes)
    if kind == "pg" and pol.recurrent:
        out = recurrent_arrays(rng, pol, n, spec.n_actions)
        if spec.continuous:
            out["log_std"] = np.full(spec.n_actions, pol.log_std_init, np.float32)
        return out
    if kind == "pg":
        actor = spec.actor_width if spec.critic_only else n  # the critic's state: v alone
        out = {**mlp_arrays(rng, "pi", actor, hidden, spec.n_actions, 0.01),
               **mlp_arrays(rng, "v", n, hidden, 1, 1.0)}
        if spec.continuous:
            out["log_std"] = np.full(spec.n_actions, pol.log_std_init, np.float32)
        return out
    if kind == "squashed":
        return mlp_arrays(rng, "net", n, hidden, 2 * spec.n_actions)
    if kind == "q":
        if not pol.dueling:
            return mlp_arrays(rng, "q", n, hidden, spec.n_actions)
        return {**mlp_arrays(rng, "trunk", n, hidden[:-1], hidden[-1]),
                **linear_default(rng, "value", hidden[-1], 1),
                **linear_default(rng, "adv", hidden[-1], spec.n_actions)}
    raise ValueError(f"no built-in numpy policy for {job.algorithm.name}")
