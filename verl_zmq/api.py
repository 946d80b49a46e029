"""The Python entry points: train a job as `verl-launch` would, load a trained
policy and act with it, evaluate a checkpoint.

    import verl_zmq
    run = verl_zmq.train("configs/cartpole_ppo.toml",
                         overrides={"evaluation.stop_at_return": 475})
    policy = verl_zmq.load_policy(run.best_checkpoint)
    action = policy.act(obs)                   # one observation, or a batch
    verl_zmq.evaluate(run.best_checkpoint, episodes=20).mean

`train` uses the same planner, launcher and run folder as `verl-launch` and
blocks until the job ends; Ctrl-C stops it cleanly (a second one at once).
Importing `verl_zmq` stays light: torch comes with the first policy loaded.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from .callbacks import Callback
from .config import ConfigError, Job, build_job, toml_value
from .config.loading import apply_override

JobLike = str | Path | Mapping[str, Any] | Job | None


def as_overrides(overrides: Mapping[str, Any] | None) -> list[str]:
    """{"section.key": value} as `--set` items."""
    return [f"{k}={toml_value(v)}" for k, v in (overrides or {}).items()]


@dataclass
class Run:
    """A finished training run: its folder, `summary.json` and how it ended."""

    run_dir: Path
    exit_code: int
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> str:
        """"done", "failed" or "interrupted"."""
        return str(self.summary.get("status", "failed"))

    @property
    def best_return(self) -> float | None:
        """The best evaluation's mean return (None before any evaluation)."""
        return self.summary.get("best_eval_return")

    @property
    def final_return(self) -> float | None:
        return self.summary.get("final_eval_return")

    @property
    def best_checkpoint(self) -> Path | None:
        """`checkpoints/best.pt`: the best evaluated policy, or None if none was kept."""
        p = self.summary.get("best_checkpoint")
        return Path(p) if p else None


def _job(job: JobLike, overrides: list[str]) -> tuple[Job | None, str | None]:
    """(a built job, None) for a dict or a Job; (None, its path) for a job file."""
    if isinstance(job, Job):
        if overrides:
            from .config import dumps_job, loads_job

            return loads_job(dumps_job(job), "<job>", overrides), None
        return job, None
    if isinstance(job, Mapping):
        raw = copy.deepcopy(dict(job))
        for item in overrides:
            apply_override(raw, item, "<dict>")
        return build_job(raw, "<dict>"), None
    return None, str(job)


def train(job: JobLike, hosts: str = "local", overrides: Mapping[str, Any] | None = None,
          run_dir: str | Path | None = None, verbose: bool = False,
          console: IO[str] | None = None, callbacks: Sequence[Callback] = (),
          check_env: bool = True, resume: str | Path | None = None) -> Run:
    """Train `job` (a job file's path, a dict of sections, or a loaded Job) on
    `hosts` ("local", a hosts file's path, or "slurm" inside an allocation), with
    `overrides` ({"section.key": value}); blocks until the job ends. Works in a
    script, a notebook (a running event loop) and a thread; a KeyboardInterrupt
    (a notebook's interrupt) stops the job cleanly. `callbacks` run in this process
    as it trains (`verl_zmq.callbacks`); `check_env` False skips stepping the env
    before the start; `resume` continues a stopped run's folder (`job` then may be
    None). Raises ValueError for a job, hosts or override that cannot start; a job
    that starts and fails is a Run with status "failed"."""
    from launcher import launch

    items = as_overrides(overrides)
    try:
        built, path = _job(job, items) if job is not None else (None, None)
        j, rd, plan = launch.load(path, None if resume else hosts, items,
                                  str(run_dir) if run_dir else None,
                                  str(resume) if resume else None, job=built)
        done = launch.run(j, path or "<job>", rd, plan, verbose=verbose,
                          console=console or sys.stderr, overrides=items,
                          callbacks=callbacks, check_env=check_env)
    except (ConfigError, launch.LaunchError) as e:
        raise ValueError(str(e)) from None
    return Run(done.run_dir, done.exit_code, done.summary)


class Policy:
    """A trained policy from a checkpoint (`step_*.pt`, `latest.pt`, `best.pt`):
    the job's env spec, observation normalisation and its deterministic or
    sampled actions, as the env takes them."""

    def __init__(self, path: str | Path):
        import torch

        from .ops.export import load_policy as _load

        torch.set_num_threads(1)
        self.path = Path(path)
        self._lp = _load(path)
        self.job = self._lp.job
        self.spec = self._lp.spec

        self.state_size = int(getattr(self._lp.algo, "state_size", 0))
        self._state: np.ndarray | None = None  # a recurrent policy's, between calls

    @property
    def recurrent(self) -> bool:
        return self.state_size > 0

    def initial_state(self, n: int = 1) -> np.ndarray:
        """A recurrent policy's state for `n` envs before their first step (zeros)."""
        return np.zeros((n, self.state_size), np.float32)

    def reset(self) -> None:
        """Forget the state kept between calls (a recurrent policy's memory)."""
        self._state = None

    def act(self, obs: Any, deterministic: bool = True, state: np.ndarray | None = None,
            episode_start: Any = None) -> Any:
        """The action for one observation (as the env gives it), or actions for a
        batch of them. A recurrent policy remembers: pass `state` (from
        `initial_state(n)` or the last call) and get `(action, state)` back, with
        `episode_start` marking the envs whose episode starts at this observation;
        without `state` it keeps one itself across calls until `reset()`."""
        from .envs.spaces import split

        if self.spec.structured:
            o: Any = split(obs, self.spec.leaves)
            lead = self.spec.leaves[0]
            single = np.ndim(o[lead.column]) == len(lead.shape)
            batch = {k: v[None] for k, v in o.items()} if single else o
            n = len(next(iter(batch.values())))
        else:
            o = np.asarray(obs)
            single = o.ndim == len(self.spec.obs_shape)
            batch = o[None] if single else o
            n = len(batch)
        if not self.recurrent:
            actions = self._lp.actions(batch, deterministic)
            return actions[0] if single else actions
        given = state is not None
        if given:
            h = np.asarray(state, np.float32).reshape(n, self.state_size)
        elif self._state is None or len(self._state) != n:
            h, episode_start = self.initial_state(n), np.ones(n, bool)
        else:
            h = self._state
        start = (np.zeros(n, bool) if episode_start is None
                 else np.broadcast_to(np.asarray(episode_start, bool).reshape(-1), (n,)).copy())
        actions, h = self._lp.actions(batch, deterministic, (h, start))
        action = actions[0] if single else actions
        if given:
            return action, h
        self._state = h
        return action

    def __repr__(self) -> str:
        return (f"Policy({str(self.path)!r}: {self.job.algorithm.name} on "
                f"{self.job.environment.id})")


def load_policy(path: str | Path) -> Policy:
    """The policy a checkpoint holds (read with `weights_only=True`)."""
    return Policy(path)


@dataclass
class Evaluation:
    """Returns of fresh episodes (one env each, seeds `seed`, `seed + 1`, ...)."""

    returns: np.ndarray

    @property
    def mean(self) -> float:
        return float(self.returns.mean())

    @property
    def std(self) -> float:
        return float(self.returns.std())


def evaluate(path: str | Path, episodes: int = 10, seed: int | None = None,
             deterministic: bool = True) -> Evaluation:
    """Run `episodes` fresh episodes of the checkpoint's policy on its job's env
    (the evaluator's env settings; `seed` defaults to `evaluation.seed`)."""
    from .policy.evaluate import evaluate as run_episodes

    p = load_policy(path)
    lp = p._lp
    first = lp.job.evaluation.seed if seed is None else seed
    algo: Any = lp.algo  # an Actor: the checkpoint's algorithm, built to act
    return Evaluation(run_episodes(algo, lp.job, lp.rms, episodes, first, deterministic))
