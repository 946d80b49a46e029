"""Algorithms, one file each; `make_algorithm` imports only the one asked for."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .traits import TRAITS

if TYPE_CHECKING:  # torch is imported with the algorithm asked for, not before
    from ..config import Job
    from ..envs.make import EnvSpec
    from .base import Algorithm


def algorithm_class(name: str) -> type[Algorithm]:
    if name not in TRAITS:
        raise KeyError(f"algorithm.name: unknown algorithm {name!r}")
    try:
        mod = importlib.import_module(f"verl_zmq.algos.{name}")
    except ImportError as e:
        raise KeyError(f"algorithm.name: {name!r} is not available in this build ({e})") from None
    cls: type[Algorithm] = mod.ALGORITHM
    return cls


def make_algorithm(job: Job, spec: EnvSpec, device: str = "cpu", **kw: Any) -> Algorithm:
    """Build the job's algorithm for an env (keywords: `worker`, `obs_transform`, as
    `Algorithm` takes them); ValueError when the policy does not fit it."""
    if job.algorithm.policy.kind == "hf":  # a Hugging Face model on prompt files
        from ..seq.hf_grpo import HFGRPO
        from .traits import fit_problem

        why = fit_problem(job, spec.kind)
        if why:
            raise ValueError(why)
        return HFGRPO(job, spec, device, **kw)
    return algorithm_class(job.algorithm.name)(job, spec, device, **kw)
