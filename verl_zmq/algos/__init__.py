"""Algorithms, one file each, each a row of the table (`config/algorithms.py`);
`make_algorithm` imports only the one asked for."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ..config.algorithms import row

if TYPE_CHECKING:  # torch is imported with the algorithm asked for, not before
    from ..config import Job
    from ..envs.spec import EnvSpec
    from .base import Algorithm


def algorithm_class(name: str) -> type[Algorithm[Any]]:
    """The class of the table's `name` (its module's `ALGORITHM`)."""
    r = row(name)
    try:
        mod = importlib.import_module(r.module)
    except ImportError as e:
        raise KeyError(f"algorithm.name: {name!r} is not available in this build ({e})") from None
    cls: type[Algorithm[Any]] = getattr(mod, r.attr)
    return cls


def make_algorithm(job: Job, spec: EnvSpec, device: str = "cpu", **kw: Any) -> Algorithm[Any]:
    """Build the job's algorithm for an env (keywords: `worker`, `obs_transform`, as
    `Algorithm` takes them); ValueError when the policy does not fit it."""
    from ..policy.kinds import algorithm

    own = algorithm(job.algorithm.policy.kind)
    if own is not None:  # a kind that trains with its own (a Hugging Face model's GRPO)
        from .traits import fit_problem

        why = fit_problem(job, spec.kind)
        if why:
            raise ValueError(why)
        made: Algorithm[Any] = own(job, spec, device, **kw)
        return made
    return algorithm_class(job.algorithm.name)(job, spec, device, **kw)
