"""Envs that may hang or crash: with `environment.step_timeout_s` set, a sampler's
envs run in subprocess workers (gymnasium's AsyncVectorEnv: a hung `step` may hold
its process's GIL, never ours). A step that does not return in time, or raises, gets
the workers killed and the envs made anew; that step is returned as `dropped` (the
in-progress episodes are lost and counted, not learnt from). After
`environment.max_env_failures` failures the sampler gives up with a clear error,
and the launcher's restart policy takes over."""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import warnings
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from ..config import Environment


def _worker_env(make_env: Callable[[Environment], gym.Env[Any, Any]], cfg: Environment
                ) -> gym.Env[Any, Any]:
    """In a worker: the env, with stderr silenced (a worker killed on purpose prints broken
    pipes; the parent reports every failure itself, in one line)."""
    import os
    import sys

    # AsyncVectorEnv also calls this once in the sampler itself (to read the spaces):
    # silence only a worker process
    if multiprocessing.parent_process() is not None:
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - for the worker's whole life
    return make_env(cfg)


class EnvFailed(RuntimeError):
    """The envs kept failing: the sampler stops and says why."""


class GuardedVectorEnv:
    """`num_envs` envs in worker processes, every step bounded by a timeout. `make_env`
    builds one env from the config in a worker (a module-level function: it is
    pickled to spawned processes)."""

    def __init__(self, cfg: Environment, num_envs: int, seeds: list[int],
                 make_env: Callable[[Environment], gym.Env[Any, Any]]):
        self.cfg = cfg
        self.make_env = make_env
        self.num_envs = num_envs
        self.seeds = list(seeds)
        self.failures = 0
        self.dropped_episodes = 0
        self.resets = 0
        self.last_error = ""
        self.venv = self._make()
        self.single_observation_space = self.venv.single_observation_space
        self.single_action_space = self.venv.single_action_space

    def _make(self) -> gym.vector.AsyncVectorEnv:
        # spawn, not fork: a sampler has threads (zmq, asyncio), and a forked child of a
        # threaded process can deadlock on a lock some thread held at the fork
        make = functools.partial(_worker_env, self.make_env, self.cfg)
        return gym.vector.AsyncVectorEnv([make] * self.num_envs, shared_memory=False,
                                         context="spawn")

    def counters(self) -> dict[str, int]:
        """What its sampler reports (`sampling.collector.Counted`)."""
        return {"env_failures": self.failures, "episodes_dropped": self.dropped_episodes}

    def reset(self, seed: Any = None, options: Any = None) -> Any:
        self.resets += 1
        seeds: Any = seed if seed is not None else self._next_seeds()
        return self.venv.reset(seed=seeds)

    def _next_seeds(self) -> list[int]:
        # fresh seeds after a failure: a deterministic hang must not repeat for ever
        self.seeds = [(s * 1_000_003 + 7) % (1 << 31) for s in self.seeds]
        return self.seeds

    def step(self, actions: Any) -> Any:
        try:
            with warnings.catch_warnings():  # gymnasium warns per worker error: we count them
                warnings.simplefilter("ignore")
                self.venv.step_async(actions)
                return self.venv.step_wait(timeout=self.cfg.step_timeout_s)
        except (multiprocessing.TimeoutError, Exception) as e:  # hung, or raised in a worker
            return self._recover(e)

    def _recover(self, err: BaseException) -> Any:
        self.failures += 1
        kind = "hung" if isinstance(err, multiprocessing.TimeoutError) else "raised"
        self.last_error = (f"an env {kind} (step past environment.step_timeout_s = "
                           f"{self.cfg.step_timeout_s} s)" if kind == "hung"
                           else f"an env raised {type(err).__name__}: {str(err)[:200]}")
        self.dropped_episodes += self.num_envs
        with contextlib.suppress(Exception):  # workers already gone: nothing to close
            self.venv.close(terminate=True)
        if self.failures >= max(1, self.cfg.max_env_failures):
            raise EnvFailed(f"environment {self.cfg.id!r} failed {self.failures} times "
                            f"(environment.max_env_failures = {self.cfg.max_env_failures}); "
                            f"last: {self.last_error}") from None
        self.venv = self._make()
        obs, _ = self.reset()
        n = self.num_envs
        return (obs, np.zeros(n), np.zeros(n, bool), np.zeros(n, bool),
                {"dropped": np.ones(n, bool)})

    def close(self) -> None:
        with contextlib.suppress(Exception):  # a broken set of workers: nothing left
            self.venv.close(terminate=True)
