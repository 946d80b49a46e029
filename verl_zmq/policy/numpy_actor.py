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

import functools
import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from ..algos.exploration import ActionNoise, apex_priorities, epsilon, epsilon_greedy
from ..config.algorithms import numpy_acting
from ..envs.spaces import features
from ..envs.spec import EnvSpec
from .actor import Actor, State
from .initial import initial_policy_arrays

Acted = tuple[np.ndarray, dict[str, np.ndarray]]
LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0  # as SAC's SquashedGaussian
_ACT: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "tanh": np.tanh, "relu": lambda x: np.maximum(x, 0.0)}


@functools.lru_cache(maxsize=256)
def _layers(keys: tuple[str, ...], prefix: str) -> tuple[tuple[str, str], ...]:
    """The (weight, bias) names of `prefix`'s Linear layers, in order: read once
    per set of names, not on every step (a dozen regular expressions a call)."""
    idx = sorted(int(m.group(1)) for k in keys
                 if (m := re.fullmatch(rf"{re.escape(prefix)}\.(\d+)\.weight", k)))
    return tuple((f"{prefix}.{i}.weight", f"{prefix}.{i}.bias") for i in idx)


def mlp(arrays: dict[str, np.ndarray], prefix: str, x: np.ndarray, activation: str) -> np.ndarray:
    """An nn.Sequential of Linear layers (at even indices) with `activation` between."""
    layers = _layers(tuple(arrays), prefix)
    act = _ACT[activation]
    for n, (w, b) in enumerate(layers):
        x = x @ arrays[w].T + arrays[b]
        if n + 1 < len(layers):
            x = act(x)
    return x


def sigmoid(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = 0.5 * (1.0 + np.tanh(0.5 * x))  # torch.sigmoid, without overflow
    return out


def lstm_step(A: dict[str, np.ndarray], x: np.ndarray, state: np.ndarray) -> np.ndarray:
    """torch.nn.LSTMCell (gates i, f, g, o) on state rows [h | c]."""
    size = A["core.weight_hh"].shape[1]
    h, c = state[:, :size], state[:, size:]
    z = x @ A["core.weight_ih"].T + A["core.bias_ih"] + h @ A["core.weight_hh"].T \
        + A["core.bias_hh"]
    i, f, g, o = (z[:, k * size:(k + 1) * size] for k in range(4))
    c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
    return np.concatenate([sigmoid(o) * np.tanh(c), c], axis=1)


def gru_step(A: dict[str, np.ndarray], x: np.ndarray, h: np.ndarray) -> np.ndarray:
    """torch.nn.GRUCell (gates r, z, n)."""
    size = A["core.weight_hh"].shape[1]
    gi = x @ A["core.weight_ih"].T + A["core.bias_ih"]
    gh = h @ A["core.weight_hh"].T + A["core.bias_hh"]
    r = sigmoid(gi[:, :size] + gh[:, :size])
    z = sigmoid(gi[:, size:2 * size] + gh[:, size:2 * size])
    n = np.tanh(gi[:, 2 * size:] + r * gh[:, 2 * size:])
    out: np.ndarray = (1.0 - z) * n + z * h
    return out


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
        self.legal: np.ndarray | None = None  # the last observation's legal actions
        self.extras = job.traits.extras
        self.worker_index, self.num_workers = worker
        self.rng = np.random.default_rng(job.experiment.seed if acting_seed is None
                                         else acting_seed)
        self.arrays: dict[str, np.ndarray] = initial_policy_arrays(job, spec)
        self.recurrent = self.kind == "pg" and self.policy.recurrent
        self.state_size = ((2 if self.policy.recurrent == "lstm" else 1)
                           * self.policy.recurrent_size if self.recurrent else 0)
        if spec.continuous:
            self.low = np.array(spec.action_low, np.float32)
            self.high = np.array(spec.action_high, np.float32)
        if self.kind == "squashed":
            self.noise = ActionNoise(self.params.noise_beta, self.params.noise_horizon, self.rng)

    def load_policy_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        """Take published params; ValueError when they lack what this policy reads."""
        own = {k: np.asarray(v, np.float32) for k, v in arrays.items()
               if not k.startswith("obs_rms/")}
        need = {"pg": "enc.0.weight" if self.recurrent else "pi.0.weight",
                "squashed": "net.0.weight",
                "q": "trunk.0.weight" if self.policy.dueling else "q.0.weight"}[self.kind]
        width = self.spec.actor_width if self.spec.critic_only else \
            int(np.prod(self.spec.obs_shape))
        if need not in own or own[need].shape[1] != width:
            raise ValueError(f"params lack {need} for {self.spec.obs_shape} observations")
        self.arrays = own

    # -- acting -------------------------------------------------------------------

    def act(self, obs: np.ndarray, deterministic: bool = False, env_steps: int = 0,
            state: State | None = None) -> Acted:
        if self.spec.structured:
            x = features(obs, self.spec.leaves)
        else:
            x = np.asarray(obs, np.float32).reshape(len(obs), -1)
        # legal actions where the env says them (1: legal)
        self.legal = np.asarray(obs[self.spec.mask]) > 0 if self.spec.mask else None
        if self.kind == "pg":
            return self._act_pg(x, deterministic, state)
        if self.kind == "q":
            return self._act_q(x, deterministic, env_steps)
        return self._act_sac(x, deterministic, env_steps)

    def value(self, x: np.ndarray) -> np.ndarray:
        """The value of each row of features (all of them: a centralised critic's
        state too), in the returns' units (scaled back where the critic learns
        normalised targets: `policy/value_norm.py`)."""
        v = mlp(self.arrays, "v", x, self.policy.activation)[:, 0]
        if "value_norm.scale" in self.arrays:
            v = v * self.arrays["value_norm.scale"] + self.arrays["value_norm.mean"]
        return v

    def actor_features(self, x: np.ndarray) -> np.ndarray:
        """What the policy head reads: the features less the critic-only leaves."""
        return x[:, :self.spec.actor_width] if self.spec.critic_only else x

    def _recurrent(self, x: np.ndarray, state: State | None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`RecurrentActorCritic.step`: (head output, value, next state)."""
        A = self.arrays
        h0, first = state if state is not None else (
            np.zeros((len(x), self.state_size), np.float32), np.ones(len(x), bool))
        z = _ACT[self.policy.activation](mlp(A, "enc", x, self.policy.activation))
        h0 = np.where(first[:, None], np.float32(0.0), h0)
        nxt = (lstm_step if self.policy.recurrent == "lstm" else gru_step)(A, z, h0)
        h = nxt[:, :A["core.weight_hh"].shape[1]]
        out = h @ A["pi.weight"].T + A["pi.bias"]
        value = (h @ A["v.weight"].T + A["v.bias"])[:, 0]
        return out, value, nxt.astype(np.float32)

    def _act_pg(self, x: np.ndarray, deterministic: bool, state: State | None = None) -> Acted:
        if self.recurrent:
            out, value, nxt = self._recurrent(x, state)
        else:
            out, value = mlp(self.arrays, "pi", self.actor_features(x),
                             self.policy.activation), self.value(x)
        if self.legal is not None:
            out = masked(out, self.legal)
        kind = self.spec.kind
        if kind == "discrete":
            a, logp = self._categorical(out, deterministic)
        elif kind == "multidiscrete":
            parts = [self._categorical(o, deterministic) for o in np.split(
                out, np.cumsum(self.spec.nvec)[:-1], axis=1)]
            a = np.stack([p[0] for p in parts], axis=1)
            logp = np.sum([p[1] for p in parts], axis=0)
        elif kind == "multibinary":
            p1 = sigmoid(out)
            a = (out > 0) if deterministic else (self.rng.random(out.shape) < p1)
            a = a.astype(np.int64)
            # log sigmoid(+-logit), stable: -softplus(-+logit)
            logp = -np.logaddexp(0.0, np.where(a == 1, -out, out)).sum(-1)
        else:
            log_std = np.broadcast_to(self.arrays["log_std"], out.shape)
            a = out if deterministic else out + np.exp(log_std) * self.rng.standard_normal(
                out.shape, dtype=np.float32)
            a = a.astype(np.float32)
            logp = gaussian_logp(a, out, log_std)
        ex = {"logp": np.asarray(logp, np.float32), "value": value.astype(np.float32)}
        if self.recurrent:
            ex["rnn_state"] = nxt
        return a, ex

    def _categorical(self, logits: np.ndarray, deterministic: bool
                     ) -> tuple[np.ndarray, np.ndarray]:
        lp = log_softmax(logits)
        if deterministic:
            a = lp.argmax(-1)
        else:  # inverse CDF, one uniform per row
            cdf = np.exp(lp).cumsum(-1)
            u = self.rng.random((len(lp), 1)) * cdf[:, -1:]
            a = np.minimum((cdf < u).sum(-1), lp.shape[1] - 1)
        return a.astype(np.int64), lp[np.arange(len(lp)), a]

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
                              None if deterministic else self.rng, self.legal)

    def _act_sac(self, x: np.ndarray, deterministic: bool, env_steps: int) -> Acted:
        n = self.spec.n_actions
        if not deterministic and env_steps < self.params.learning_starts:
            return self.noise.warmup((len(x), n)), {}
        out = mlp(self.arrays, "net", x, "relu")
        mu, log_std = out[:, :n], np.clip(out[:, n:], LOG_STD_MIN, LOG_STD_MAX)
        u = mu if deterministic else mu + np.exp(log_std) * self.noise(mu.shape)
        return np.tanh(u).astype(np.float32), {}

    def env_action(self, action: np.ndarray) -> np.ndarray:
        if not self.spec.continuous:
            return env_action_of(self.spec, action)
        if self.kind == "squashed":
            out: np.ndarray = self.low + (np.clip(action, -1, 1) + 1.0) * 0.5 * (
                self.high - self.low)
            return out
        return np.asarray(np.clip(action, self.low, self.high))

    def finish_fragment(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.kind != "q":
            return {}
        return {"priority": apex_priorities(arrays, self.params.gamma, self.params.n_step)}


def masked(logits: np.ndarray, legal: np.ndarray) -> np.ndarray:
    """Logits with illegal actions at -inf-like (a row with no legal action is
    left as it is: the env's mask is wrong there, not the policy)."""
    none = ~legal.any(-1, keepdims=True)
    out: np.ndarray = np.where(legal | none, logits, np.float32(-1e9)).astype(np.float32)
    return out


def env_action_of(spec: EnvSpec, action: np.ndarray) -> np.ndarray:
    """A discrete-kind action as its space takes it (MultiBinary: int8)."""
    return action.astype(np.int8) if spec.kind == "multibinary" else action


def make_actor(job: Any, spec: EnvSpec, worker: tuple[int, int], seeds: tuple[int, int],
               threads: int | None = None, device: str = "cpu") -> Actor:
    """A sampler's (or the evaluator's) policy copy: numpy for the built-in MLPs
    when the job allows it and it acts on the CPU, else the torch algorithm on
    `device` with `threads` threads (the sampler's by default), its initial weights
    from the job seed as the learner's."""
    torch_seed, acting_seed = seeds
    if numpy_acting(job) and not spec.images and device == "cpu":
        return NumpyActor(job, spec, worker, acting_seed)
    import torch  # only roles that act with torch pay for importing it

    from ..algos import make_algorithm
    from ..algos.base import resolve_device

    torch.set_num_threads(threads or job.resources.sampler.cpu or job.sampling.torch_threads)
    torch.manual_seed(job.experiment.seed)  # the learner's initial weights
    algo = make_algorithm(job, spec, resolve_device(device, "sampling.device"), worker=worker,
                          acting_seed=acting_seed)
    torch.manual_seed(torch_seed)  # after the weights: this sampler's own action noise
    return algo
