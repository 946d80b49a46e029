"""Acting without torch: numpy forward passes of the built-in MLP policies.

A sampler only needs a policy's forward pass, and for the small MLPs the
built-in algorithms use numpy is quicker than torch per call (no dispatch
overhead) and imports in a fraction of the time. It starts from the job's
version-0 weights, which it makes itself (`policy_init`: the arrays the learner
loads into its modules), so a sampler steps its envs about a second after it
starts, before any learner is up. `make_actor` gives a sampler a `NumpyActor`
for ppo, dapo, dqn and sac with `sampling.inference = "auto"` or `"numpy"`, and
the torch algorithm otherwise (the general path: any network). Both read the
same params arrays
(the torch modules' state_dict names) and give the same actions,
log-probabilities and values (`tests/test_actors.py`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from ..algos.exploration import ActionNoise, apex_priorities, epsilon, epsilon_greedy
from ..envs.make import EnvSpec
from .actor import Actor
from .initial import initial_policy_arrays

Acted = tuple[np.ndarray, dict[str, np.ndarray]]
LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0  # as SAC's SquashedGaussian
_ACT: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "tanh": np.tanh, "relu": lambda x: np.maximum(x, 0.0)}


def mlp(arrays: dict[str, np.ndarray], prefix: str, x: np.ndarray, activation: str) -> np.ndarray:
    """An nn.Sequential of Linear layers (at even indices) with `activation` between."""
    idx = sorted(int(m.group(1)) for k in arrays
                 if (m := re.fullmatch(rf"{re.escape(prefix)}\.(\d+)\.weight", k)))
    act = _ACT[activation]
    for n, i in enumerate(idx):
        x = x @ arrays[f"{prefix}.{i}.weight"].T + arrays[f"{prefix}.{i}.bias"]
        if n + 1 < len(idx):
            x = act(x)
    return x


def log_softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(-1, keepdims=True)
    out: np.ndarray = z - np.log(np.exp(z).sum(-1, keepdims=True))
    return out


def gaussian_logp(a: np.ndarray, mu: np.ndarray, log_std: np.ndarray) -> np.ndarray:
    out: np.ndarray = (-0.5 * ((a - mu) / np.exp(log_std)) ** 2 - log_std
                       - 0.5 * math.log(2 * math.pi)).sum(-1)
    return out


class NumpyActor:
    """A built-in algorithm's `Actor` (policy/actor.py) in numpy."""

    def __init__(self, job: Any, spec: EnvSpec, worker: tuple[int, int] = (0, 1),
                 acting_seed: int | None = None):
        self.job, self.spec = job, spec
        self.kind = job.traits.numpy_actor
        if not self.kind:
            raise ValueError(f"sampling.inference: no numpy policy for {job.algorithm.name}; "
                             f"use \"torch\" or \"auto\"")
        self.params = job.algorithm.params
        self.policy = job.algorithm.policy
        self.extras = job.traits.extras
        self.worker_index, self.num_workers = worker
        self.rng = np.random.default_rng(job.experiment.seed if acting_seed is None
                                         else acting_seed)
        self.arrays: dict[str, np.ndarray] = initial_policy_arrays(job, spec)
        if not spec.discrete:
            self.low = np.array(spec.action_low, np.float32)
            self.high = np.array(spec.action_high, np.float32)
        if self.kind == "squashed":
            self.noise = ActionNoise(self.params.noise_beta, self.params.noise_horizon, self.rng)

    def load_policy_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        """Take published params; ValueError when they lack what this policy reads."""
        own = {k: np.asarray(v, np.float32) for k, v in arrays.items()
               if not k.startswith("obs_rms/")}
        need = {"pg": "pi.0.weight", "squashed": "net.0.weight",
                "q": "trunk.0.weight" if self.policy.dueling else "q.0.weight"}[self.kind]
        if need not in own or own[need].shape[1] != int(np.prod(self.spec.obs_shape)):
            raise ValueError(f"params lack {need} for {self.spec.obs_shape} observations")
        self.arrays = own

    # -- acting -------------------------------------------------------------------

    def act(self, obs: np.ndarray, deterministic: bool = False, env_steps: int = 0) -> Acted:
        x = np.asarray(obs, np.float32).reshape(len(obs), -1)
        if self.kind == "pg":
            return self._act_pg(x, deterministic)
        if self.kind == "q":
            return self._act_q(x, deterministic, env_steps)
        return self._act_sac(x, deterministic, env_steps)

    def value(self, x: np.ndarray) -> np.ndarray:
        return mlp(self.arrays, "v", x, self.policy.activation)[:, 0]

    def _act_pg(self, x: np.ndarray, deterministic: bool) -> Acted:
        out = mlp(self.arrays, "pi", x, self.policy.activation)
        if self.spec.discrete:
            lp = log_softmax(out)
            if deterministic:
                a = lp.argmax(-1)
            else:  # inverse CDF, one uniform per row
                cdf = np.exp(lp).cumsum(-1)
                u = self.rng.random((len(x), 1)) * cdf[:, -1:]
                a = np.minimum((cdf < u).sum(-1), lp.shape[1] - 1)
            logp = lp[np.arange(len(x)), a]
            a = a.astype(np.int64)
        else:
            log_std = np.broadcast_to(self.arrays["log_std"], out.shape)
            a = out if deterministic else out + np.exp(log_std) * self.rng.standard_normal(
                out.shape, dtype=np.float32)
            a = a.astype(np.float32)
            logp = gaussian_logp(a, out, log_std)
        return a, {"logp": logp.astype(np.float32), "value": self.value(x).astype(np.float32)}

    def q_values(self, x: np.ndarray) -> np.ndarray:
        A = self.arrays
        if not self.policy.dueling:
            return mlp(A, "q", x, self.policy.activation)
        h = _ACT[self.policy.activation](mlp(A, "trunk", x, self.policy.activation))
        v = h @ A["value.weight"].T + A["value.bias"]
        adv = h @ A["adv.weight"].T + A["adv.bias"]
        out: np.ndarray = v + adv - adv.mean(-1, keepdims=True)
        return out

    def epsilon(self, env_steps: int = 0) -> float:
        return epsilon(self.params, self.worker_index, self.num_workers, env_steps)

    def _act_q(self, x: np.ndarray, deterministic: bool, env_steps: int) -> Acted:
        return epsilon_greedy(self.q_values(x), self.epsilon(env_steps),
                              None if deterministic else self.rng)

    def _act_sac(self, x: np.ndarray, deterministic: bool, env_steps: int) -> Acted:
        n = self.spec.n_actions
        if not deterministic and env_steps < self.params.learning_starts:
            return self.noise.warmup((len(x), n)), {}
        out = mlp(self.arrays, "net", x, "relu")
        mu, log_std = out[:, :n], np.clip(out[:, n:], LOG_STD_MIN, LOG_STD_MAX)
        u = mu if deterministic else mu + np.exp(log_std) * self.noise(mu.shape)
        return np.tanh(u).astype(np.float32), {}

    def env_action(self, action: np.ndarray) -> np.ndarray:
        if self.spec.discrete:
            return action
        if self.kind == "squashed":
            out: np.ndarray = self.low + (np.clip(action, -1, 1) + 1.0) * 0.5 * (
                self.high - self.low)
            return out
        return np.asarray(np.clip(action, self.low, self.high))

    def finish_fragment(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.kind != "q":
            return {}
        return {"priority": apex_priorities(arrays, self.params.gamma, self.params.n_step)}


def numpy_acting(job: Any) -> bool:
    """Whether the job's policy acts in numpy (`sampling.inference`): the built-in
    MLPs under "auto", or "numpy"."""
    how = job.sampling.inference
    return how == "numpy" or (how == "auto" and bool(job.traits.numpy_actor))


def make_actor(job: Any, spec: EnvSpec, worker: tuple[int, int], seeds: tuple[int, int],
               threads: int | None = None) -> Actor:
    """A sampler's (or the evaluator's) policy copy: numpy for the built-in MLPs
    when the job allows it, else the torch algorithm on `threads` threads (the
    sampler's by default), its initial weights from the job seed as the learner's."""
    torch_seed, acting_seed = seeds
    if numpy_acting(job):
        return NumpyActor(job, spec, worker, acting_seed)
    import torch  # only roles that act with torch pay for importing it

    from ..algos import make_algorithm

    torch.set_num_threads(threads or job.resources.sampler.cpu or job.sampling.torch_threads)
    torch.manual_seed(job.experiment.seed)  # the learner's initial weights
    algo = make_algorithm(job, spec, worker=worker, acting_seed=acting_seed)
    torch.manual_seed(torch_seed)  # after the weights: this sampler's own action noise
    return algo
