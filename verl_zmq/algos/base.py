"""The algorithm contract. Roles call only this; algorithms know no sockets.

Everything a role hands an algorithm goes through its constructor or a call,
never through attributes set from outside:

- constructor: the job, the env's spec, the device, the sampler it acts for
  (`worker`: index and count, for per-worker exploration) and the learner's
  observation transform (demonstrations are raw: they are normalised alike);
  a gossip peer's `reduce_grads` (gradients averaged with its neighbours every
  minibatch; PPO's update, and so DAPO's, takes it).
- `act(obs, deterministic, env_steps)` (samplers, evaluator): actions for a batch
  of observations plus the per-step extras recorded in fragments; `env_steps` is
  the job's env steps as the sampler estimates them (exploration schedules).
- `learn(batch, at)` (learner): one update at a point of training (`Progress`);
  returns `Learned`: its metrics and, off-policy, the batch's new priorities.
- `fragment_filter()`: what the learner's fragment feed applies to each fragment
  before an update (dynamic sampling, group filtering), or None.
- `policy_arrays()` / `load_policy_arrays()`: what travels in a params message.
- `state_dict()` / `load_state_dict()`: everything a checkpoint holds.

What roles may know of an algorithm without building one is in `traits.py`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, cast

import numpy as np
import torch

from ..config import Job, Params
from ..config.algorithms import Traits
from ..envs.spec import EnvSpec
from .optim import Adam
from .traits import fit_problem

if TYPE_CHECKING:
    from ..demos import BCTerm

ObsTransform = Callable[[np.ndarray], np.ndarray]
# (parameters whose .grad to average, or None to open an update; scalars) -> the
# scalars averaged alike: a gossip peer's gradient rounds (learning/grad_mix.py)
GradReduce = Callable[[Sequence[torch.Tensor] | None, dict[str, float]], dict[str, float]]


def grad_norm(params: Sequence[torch.Tensor]) -> torch.Tensor:
    """The global norm of the gradients, from one foreach call."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    norm: torch.Tensor = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    return norm


def clip_grad_norm(params: Sequence[torch.Tensor], max_norm: float) -> torch.Tensor:
    """`torch.nn.utils.clip_grad_norm_` without its per-call wrappers (a third of a
    small network's optimiser step on CPU): the global norm from one foreach
    call, the gradients scaled in place when it exceeds `max_norm`."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    norm: torch.Tensor = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    torch._foreach_mul_(grads, (max_norm / (norm + 1e-6)).clamp(max=1.0))
    return norm


def step_if_finite(opt: Any, norm: torch.Tensor) -> bool:
    """Step unless the gradient's norm is NaN or infinite, as a loss scaler skips an
    overflow: clipping by such a norm makes every weight NaN, and every sampler's
    actions with them. The weights and the optimiser's state stay as they were; the
    trainer ends the job after `training.max_nonfinite_updates` such in a row."""
    if not bool(torch.isfinite(norm)):
        opt.zero_grad(set_to_none=True)
        return False
    opt.step()
    return True


def scheduled(value: float, kind: str, fraction: float) -> float:
    """A hyper-parameter at a point of training: "linear" decays it to 0 at the
    job's budget (`fraction` of it done), "constant" keeps it."""
    return value * max(0.0, 1.0 - fraction) if kind == "linear" else value


def adam(params: Iterable[torch.Tensor], lr: float, **kw: Any) -> Adam:
    """Adam stepping all tensors in one foreach call, not a Python loop over them
    (torch's default on CPU, about a tenth of a small network's update), and
    without importing torch's compiler (`optim.py`)."""
    return Adam(params, lr=lr, **kw)


def resolve_device(name: str, key: str = "training.device") -> str:
    """`training.device` (or `sampling.device`, `key`): "auto" is the first GPU this
    process may see, else the CPU; a GPU asked for where torch sees none is a clear
    error, not a traceback."""
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"{key} = {name!r}: torch sees no GPU in this process "
                         "(a CPU build of torch, no device, or CUDA_VISIBLE_DEVICES empty); "
                         "use \"auto\" or \"cpu\"")
    return name


@dataclass(frozen=True)
class Progress:
    """Where training is when an update runs: env steps so far and their fraction
    of `training.total_timesteps` (schedules anneal on it)."""

    env_steps: int = 0
    fraction: float = 0.0


START = Progress()


@dataclass
class Learned:
    """What one update returns: `losses/...` and `charts/...` metrics and, for
    replayed batches, one new priority per sampled transition."""

    metrics: dict[str, float] = field(default_factory=dict)
    priorities: np.ndarray | None = None
    # what the update computed that charts may show (PPO: "advantages"), not copied
    samples: dict[str, Any] = field(default_factory=dict)


# a fragment -> None (drop it), or what is kept of it and the steps that count
FragmentFilter = Callable[[Mapping[str, np.ndarray]],
                          "tuple[Mapping[str, np.ndarray], int] | None"]


P = TypeVar("P", bound=Params)


class Algorithm(ABC, Generic[P]):
    """One RL algorithm: networks, acting, learning, state; `P` its params'
    dataclass (`self.params`, typed: `Algorithm[PPOParams]`)."""

    name: ClassVar[str]
    state_size = 0  # a recurrent policy's state per env (see policy/actor.py)
    # attributes a checkpoint holds: modules and optimisers (state_dict), or tensors
    state_attrs: ClassVar[tuple[str, ...]] = ()

    def __init__(self, job: Job, spec: EnvSpec, device: str = "cpu",
                 worker: tuple[int, int] = (0, 1), obs_transform: ObsTransform | None = None,
                 acting_seed: int | None = None, reduce_grads: GradReduce | None = None):
        why = fit_problem(job, spec.kind, bool(spec.images))
        if why:
            raise ValueError(why)
        self.job = job
        self.spec = spec
        # the table chose this dataclass for the algorithm's name (config/algorithms.py)
        self.params: P = cast(P, job.algorithm.params)
        self.device = torch.device(device)
        self.updates = 0
        self.worker_index, self.num_workers = worker  # the sampler this copy acts for
        self.obs_transform = obs_transform  # raw observations -> what the networks take
        # exploration noise drawn in numpy (epsilon-greedy, random warm-up actions): a
        # sampler passes its own seed, so samplers do not explore in lock-step
        self.rng = np.random.default_rng(job.experiment.seed if acting_seed is None
                                         else acting_seed)
        self._bc: BCTerm | None = None
        self.reduce_grads = reduce_grads

    def init_policy(self) -> None:
        """Give the policy module its version-0 weights: those of the checkpoint
        `algorithm.init_from` names, else from `policy_init`, the arrays a numpy
        sampler makes for itself (built-in policies only)."""
        path = self.job.algorithm.init_from
        if path:
            from ..checkpoint import load

            try:
                state = load(path)
            except (OSError, RuntimeError) as e:
                raise ValueError(f"algorithm.init_from: cannot read {path!r}: {e}") from None
            arrays = {k: v.numpy() for k, v in state.get("policy", {}).items()}
            try:
                self.load_policy_arrays(arrays)
            except ValueError as e:
                raise ValueError(f"algorithm.init_from: {path!r} does not fit this job's "
                                 f"policy: {e}") from None
        elif self.traits.numpy_actor and not self.spec.images:
            from ..policy.initial import initial_policy_arrays

            self.load_policy_arrays(initial_policy_arrays(self.job, self.spec))

    def autocast(self) -> torch.autocast:
        """The forward passes and losses of an update under `training.amp`: "bf16"
        autocasts them to bfloat16 (on a GPU, or the CPU); backward passes and
        optimiser steps stay outside, in float32."""
        return torch.autocast(self.device.type, dtype=torch.bfloat16,
                              enabled=self.job.training.amp == "bf16")

    def to_device(self, x: Any) -> torch.Tensor:
        """A batch column on the learner's device, moved once per update: to a GPU
        through pinned host memory and an asynchronous copy."""
        t = torch.as_tensor(np.asarray(x))
        if self.device.type == "cuda":
            return t.pin_memory().to(self.device, non_blocking=True)
        return t.to(self.device)  # a no-op on the CPU, where a device-path check sees it

    @property
    def traits(self) -> Traits:
        t: Traits = self.job.traits
        return t

    @property
    def on_policy(self) -> bool:
        return self.traits.on_policy

    @property
    def extras(self) -> tuple[str, ...]:
        return self.traits.extras

    def fragment_filter(self) -> FragmentFilter | None:
        """A filter on fragments before an update: None drops one, else (the fragment
        to learn from, perhaps with parts marked out, and the env steps of it that
        count towards the batch). None: keep all."""
        return None

    def bc_batch(self, env_steps: int) -> tuple[float, torch.Tensor, torch.Tensor] | None:
        """(weight, obs, action) of a demonstration batch when behaviour cloning is on
        and its weight is not zero yet. Demonstrations are loaded at the first call,
        so only the learner (never a sampler) reads the file."""
        cfg = self.job.algorithm.bc
        if not cfg.demos or cfg.mixing_ratio <= 0:
            return None
        if self._bc is None:
            from ..demos import BCTerm

            self._bc = BCTerm(cfg, self.spec, self.job.experiment.seed)
        w = self._bc.weight(env_steps)
        if w <= 0:
            return None
        obs, act = self._bc.batch()
        if self.obs_transform is not None:
            obs = self.obs_transform(obs)
        return (w, torch.as_tensor(obs, dtype=torch.float32, device=self.device),
                torch.as_tensor(act, device=self.device))

    @abstractmethod
    def act(self, obs: np.ndarray, deterministic: bool = False, env_steps: int = 0,
            state: Any = None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Actions for a batch of observations, and the extras to record
        (`policy/actor.py`: `state` for recurrent policies)."""

    def env_action(self, action: np.ndarray) -> np.ndarray:
        """What the env receives for a recorded action (e.g. clipped to bounds)."""
        return action

    def finish_fragment(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Samplers: arrays to add to a finished fragment (e.g. initial priorities)."""
        return {}

    @abstractmethod
    def learn(self, batch: Mapping[str, np.ndarray], at: Progress = START) -> Learned:
        """One update from a batch at a point of training."""

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
        """The policy's arrays, copied: a view of the live tensors would change under
        the next update while a message holding it waits to be sent."""
        return {k: v.detach().to("cpu", copy=True).numpy()
                for k, v in self.policy_module().state_dict().items()}

    def wire_arrays(self) -> dict[str, np.ndarray]:
        """What a params message carries to samplers and the evaluator (which load it
        with `load_policy_arrays`): the policy's arrays, or a packed form of them."""
        return self.policy_arrays()

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

    def take_updates(self, updates: int) -> None:
        """Continue counting from `updates` (a data-parallel rank takes rank 0's count
        with its weights): the algorithm's schedules and target updates follow it."""
        self.updates = int(updates)

    def state_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"updates": self.updates}
        for name in self.state_attrs:
            obj = getattr(self, name)
            if obj is not None:  # an optional part (a reference policy) this job has not
                out[name] = obj.detach().clone() if torch.is_tensor(obj) else obj.state_dict()
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.updates = int(state.get("updates", 0))
        for name in self.state_attrs:
            obj = getattr(self, name)
            if obj is None:
                continue
            if torch.is_tensor(obj):
                with torch.no_grad():
                    obj.copy_(state[name])
            else:
                obj.load_state_dict(state[name])
