"""Environments: any gymnasium env by id or `module:Class`, vectorised.

Samplers build `num_envs_per_worker` copies as one vector env: gymnasium's own
vectorised entry point where the env has one (4x faster on light envs), else
the sync vector env. Every vector env here autoresets in NEXT_STEP mode: the
step after an episode ends only resets that env (its action is ignored); the
sampler marks that step invalid.
"""

from __future__ import annotations

import difflib
import importlib
import re
from typing import Any, Protocol

import gymnasium as gym
import numpy as np

from .. import plugins
from ..config import Environment, Job
from ..importing import IMPORTABLE, load_object
from . import tasks  # noqa: F401  (registers its env ids)
from .contract import under_wrappers
from .families import source
from .guard import GuardedVectorEnv
from .spaces import Leaf, SpaceError, action_space, mask_column, obs_leaves, plain
from .spec import EnvSpec as EnvSpec  # re-exported: the spec is made here (env_spec)


class EnvError(Exception):
    """An env that cannot be made or used; the message says why."""


def _load_object(path: str, what: str) -> Any:
    try:
        return load_object(path, what)
    except ValueError as e:
        raise EnvError(str(e)) from None


def resolve_id(env_id: str) -> str:
    """A registered id as is (the families' ids are registered first:
    `plugins.load`); gymnasium's `pkg.module:EnvName-v0` (the module is imported,
    and registers the id); `module:Class` registered once under `verl/Class-v0`."""
    plugins.load()
    module, _, name = env_id.rpartition(":")
    if module == "__main__":
        raise EnvError(f"environment.id {env_id!r}: a class defined in the running script "
                       f"cannot be imported by the roles (each runs in its own process); move "
                       f"it into a module beside the script (mymodule.py) and name it "
                       f"\"mymodule:{name}\": the current folder is importable, and other "
                       f"hosts need the module too")
    if module and re.fullmatch(r"[\w.\-/]+-v\d+", name):
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise EnvError(f"environment.id {env_id!r}: cannot import {module!r} ({e}); "
                           f"{IMPORTABLE}") from None
        env_id = name
    if ":" not in env_id:
        if env_id not in gym.registry and env_id.startswith("ALE/"):
            try:
                from .atari import register_ale

                register_ale()
            except ImportError:
                raise EnvError(f"environment.id: {env_id!r} needs ale-py: pip install "
                               f"'verl-zmq[atari]'") from None
        if env_id not in gym.registry:
            close = difflib.get_close_matches(env_id, list(gym.registry), n=5, cutoff=0.5)
            hint = f"; closest registered ids: {', '.join(close)}" if close else ""
            raise EnvError(f"environment.id: unknown gymnasium env {env_id!r}{hint}")
        return env_id
    _load_object(env_id, "environment.id")
    reg_id = f"verl/{env_id.rsplit(':', 1)[1]}-v0"
    if reg_id not in gym.registry:
        gym.register(id=reg_id, entry_point=env_id)
    return reg_id


class StepReward(Protocol):
    """`environment.reward_fn` (a `module:function`): the reward of one step from
    the observation before it, the action, the env's own reward and the
    observation after it."""

    def __call__(self, obs: Any, action: Any, reward: float, next_obs: Any) -> float: ...


class RewardFn(gym.Wrapper):
    """Replaces the reward with `fn(obs, action, reward, next_obs)`."""

    def __init__(self, env: gym.Env, fn: StepReward):
        super().__init__(env)
        self.fn = fn
        self._obs = None

    def reset(self, **kw: Any) -> Any:
        obs, info = self.env.reset(**kw)
        self._obs = obs
        return obs, info

    def step(self, action: Any) -> Any:
        obs, r, term, trunc, info = self.env.step(action)
        reward = float(self.fn(self._obs, action, float(r), obs))
        self._obs = obs
        return obs, reward, term, trunc, info


def make_env(cfg: Environment, render_mode: str | None = None,
             training: bool = True) -> gym.Env:
    """One env as the job describes it; `training=False` (the evaluator) plays whole
    unclipped episodes where a preset would end them at a lost life or clip rewards."""
    env_id = resolve_id(cfg.id)
    kw = dict(cfg.kwargs)
    if cfg.preset == "atari":
        kw.setdefault("frameskip", 1)  # the preset skips frames itself, max-pooling
    if cfg.max_episode_steps:
        kw["max_episode_steps"] = cfg.max_episode_steps
    if render_mode:
        kw["render_mode"] = render_mode
    try:
        env = gym.make(env_id, **kw)
    except gym.error.Error as e:
        raise EnvError(f"environment {cfg.id!r}: {e}") from None
    except TypeError as e:
        raise EnvError(f"environment.kwargs for {cfg.id!r}: {e}") from None
    except ValueError as e:  # the env refused its settings; its message names them
        raise EnvError(f"environment {cfg.id!r}: {e}") from None
    env = under_wrappers(env, cfg.id)
    env = user_wrappers(env, cfg)
    if cfg.reward_fn:
        env = RewardFn(env, _load_object(cfg.reward_fn, "environment.reward_fn"))
    return _image_wrappers(env, cfg, training)


def user_wrappers(env: gym.Env, cfg: Environment) -> gym.Env:
    """`environment.wrappers`, in order, innermost first."""
    for i, w in enumerate(cfg.wrappers):
        path, kw = (w["wrapper"], w.get("kwargs", {})) if isinstance(w, dict) else (w, {})
        cls = _load_object(path, f"environment.wrappers[{i}]")
        try:
            env = cls(env, **kw)
        except (TypeError, ValueError, gym.error.Error) as e:
            env.close()
            raise EnvError(f"environment.wrappers[{i}] {path}: {e}") from None
    return env


def _image_wrappers(env: gym.Env, cfg: Environment, training: bool) -> gym.Env:
    from .atari import ATARI_STACK, StackFrames, atari

    try:
        if cfg.preset == "atari":
            env = atari(env, training)
        stack = cfg.frame_stack or (ATARI_STACK if cfg.preset == "atari" else 0)
        return StackFrames(env, stack) if stack > 1 else env
    except (ValueError, gym.error.Error) as e:
        env.close()
        raise EnvError(f"environment {cfg.id!r}: {e}") from None


def env_seeds(job_seed: int, worker_index: int, num_envs: int) -> list[int]:
    """Distinct, reproducible per-env seeds from (job seed, worker index, env index)."""
    ss = np.random.SeedSequence([job_seed, worker_index])
    return [int(s) for s in ss.generate_state(num_envs, dtype=np.uint32)]


def _native_ok(cfg: Environment, env_id: str) -> bool:
    if cfg.vectorization in ("sync", "threads") or cfg.reward_fn or cfg.max_episode_steps \
            or cfg.preset or cfg.frame_stack or cfg.wrappers:
        return False
    return gym.spec(env_id).vector_entry_point is not None


def native_vector_env(cfg: Environment) -> bool:
    """Whether samplers step the env's own vector env (one object for all envs)."""
    return cfg.step_timeout_s <= 0 and _native_ok(cfg, resolve_id(cfg.id))


def make_vector_env(cfg: Environment, num_envs: int, seed: int,
                    worker_index: int = 0) -> tuple[Any, list[int]]:
    """`num_envs` copies as one vector env (gymnasium's, or the guard's, which steps
    as one), and the seeds to reset it with."""
    env_id = resolve_id(cfg.id)
    seeds = env_seeds(seed, worker_index, num_envs)
    if cfg.step_timeout_s > 0:  # envs that may hang or crash: worker processes, guarded
        return GuardedVectorEnv(cfg, num_envs, seeds, make_env), seeds
    if cfg.vectorization == "threads":  # envs that wait: a vector step at once
        from .threads import ThreadVectorEnv

        return ThreadVectorEnv([lambda: make_env(cfg) for _ in range(num_envs)]), seeds
    if cfg.vectorization != "sync" and _native_ok(cfg, env_id):
        try:
            venv = gym.make_vec(env_id, num_envs, vectorization_mode="vector_entry_point",
                                **cfg.kwargs)
            return venv, seeds[:1]  # a native vector env takes one seed for all its envs
        except ValueError as e:  # the vector env refused its settings: say which
            raise EnvError(f"environment {cfg.id!r}: {e}") from None
        except (gym.error.Error, TypeError) as e:
            if cfg.vectorization == "native":
                raise EnvError(f"environment {cfg.id!r}: no native vector env: {e}") from None
    elif cfg.vectorization == "native":
        raise EnvError(f"environment.vectorization: {cfg.id!r} has no native vector env "
                       f"usable with this job; use \"auto\" or \"sync\"")
    venv = gym.vector.SyncVectorEnv([lambda: make_env(cfg) for _ in range(num_envs)])
    return venv, seeds


def spec_of(obs_space: gym.Space[Any], act_space: gym.Space[Any], env_id: str) -> EnvSpec:
    try:
        leaves = obs_leaves(obs_space, f"{env_id}: observation space")
        act = action_space(act_space, f"{env_id}: action space")
    except SpaceError as e:
        raise EnvError(str(e)) from None
    obs: tuple[Leaf, ...] = ()
    if plain(leaves):
        shape = leaves[0].shape
    else:
        shape, obs = (sum(leaf.width for leaf in leaves),), leaves
    return EnvSpec(shape, act.kind == "discrete", act.n, act.shape, act.low, act.high,
                   obs, "" if act.kind in ("discrete", "box") else act.kind, act.nvec,
                   mask=mask_column(leaves, act))


def env_spec(cfg: Environment) -> EnvSpec:
    """Build the env once and describe its spaces; refuse unsupported spaces. An id
    whose responses a family generates has no env: the family describes it."""
    src = source(cfg.id)
    if src is not None:
        try:
            return src.spec(cfg)
        except ValueError as e:
            raise EnvError(str(e)) from None
    env = make_env(cfg)
    try:
        return spec_of(env.observation_space, env.action_space, cfg.id)
    finally:
        env.close()


def job_spec(job: Job, group: str = "main") -> tuple[Job, EnvSpec, str]:
    """What a role of `group` works with: the job and its env's spaces, or in a
    multi-agent job (a PettingZoo env) the job as its group's policy trains it
    (`Job.policy_view`), that policy's spaces, and its name ("" for one agent)."""
    from .agents import AgentEnvError, is_multiagent, policy_spec

    try:
        if not is_multiagent(job.environment):
            return job, env_spec(job.environment), ""
        policy = job.multiagent.policy_of_group(group)
        return job.policy_view(policy), policy_spec(job.environment, job.multiagent,
                                                    policy), policy
    except AgentEnvError as e:
        raise EnvError(str(e)) from None
