"""Env families: kinds of env the core serves without knowing them by name.
A family (`plugins.FAMILIES`) registers its env ids here when it is imported:

- `SOURCES`: ids with no env to step, whose responses the policy generates
  itself (prompt files): the family gives the env's spec, what a job must be to
  fit it, the problems of its files, and the collector a sampler runs instead
  of stepping a vector env;
- `GROUPED`: sequence envs whose vector env answers each prompt `group_size`
  times side by side in lock-step rounds (what grouped algorithms, GRPO, learn
  from): the length of a round and of the longest response, from the env's
  kwargs.

Lookups load the families first (`plugins.load`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from .. import plugins
from ..config import Environment
from .spec import EnvSpec


class ResponseSource(Protocol):
    """An env id with no env: the policy generates whole responses to prompts."""

    def spec(self, cfg: Environment) -> EnvSpec:
        """The spaces, as the networks and the fragment's layout see them; ValueError
        for settings that cannot be."""
        ...

    def fit_problem(self, job: Any) -> str:
        """Why the job (its policy, its fragments' shape) cannot answer these, or ""."""
        ...

    def file_problems(self, job: Any) -> list[str]:
        """Its data files and scorer checked whole: each problem one sentence."""
        ...

    def collector(self, job: Any, algo: Any, worker: int, workers: int) -> Any:
        """What a sampler runs instead of stepping envs (a `sampling.Collector`)."""
        ...

    def budget(self, job: Any) -> int | None:
        """The job's budget in env steps where its files set it (passes over the
        prompts), else None: `training.total_timesteps` as written."""
        ...


@dataclass(frozen=True)
class Grouped:
    """A sequence env that puts each prompt's `group_size` responses side by side."""

    round_steps: Callable[[dict[str, Any]], int]  # vector steps of one lock-step round
    horizon: Callable[[dict[str, Any]], int]  # its longest response, in tokens


SOURCES: dict[str, ResponseSource] = {}
GROUPED: dict[str, Grouped] = {}


def source(env_id: str) -> ResponseSource | None:
    """The family that generates this id's responses, or None for an env."""
    plugins.load()
    return SOURCES.get(env_id)


def with_budget(job: Any) -> Any:
    """The job with `training.total_timesteps` as its source's files set it (a
    prompt job's `total_epochs`), or as it is."""
    src = source(job.environment.id)
    steps = src.budget(job) if src is not None else None
    if steps is None or steps == job.training.total_timesteps:
        return job
    return replace(job, training=replace(job.training, total_timesteps=steps))


def grouped(env_id: str) -> Grouped | None:
    """The grouped sequence env of this id, or None."""
    plugins.load()
    return GROUPED.get(env_id)
