"""Algorithms, one file each; `make_algorithm` imports only the one asked for."""

from __future__ import annotations

import importlib

from .traits import TRAITS


def algorithm_class(name: str):
    if name not in TRAITS:
        raise KeyError(f"algorithm.name: unknown algorithm {name!r}")
    try:
        mod = importlib.import_module(f"verl_zmq.algos.{name}")
    except ImportError as e:
        raise KeyError(f"algorithm.name: {name!r} is not available in this build ({e})") from None
    return mod.ALGORITHM


def make_algorithm(job, spec, device: str = "cpu", **kw):
    """Build the job's algorithm for an env (keywords: `worker`, `obs_transform`, as
    `Algorithm` takes them); ValueError when the policy does not fit it."""
    return algorithm_class(job.algorithm.name)(job, spec, device, **kw)
