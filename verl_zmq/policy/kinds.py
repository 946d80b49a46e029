"""Policy kinds (`algorithm.policy.kind`) beyond the built-in MLPs, registered by
the families that bring them (`plugins.py`): `NETWORKS` builds a kind's
policy-gradient network from the env's spec and the policy section (the
sequence family's causal transformer), `ALGORITHMS` builds the algorithm a kind
trains with when it is not the job's named one (a Hugging Face model's GRPO,
which owns its model). Lookups load the families first."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import plugins

NETWORKS: dict[str, Callable[[Any, Any], Any]] = {}  # kind -> (spec, policy) -> PolicyNet
ALGORITHMS: dict[str, Callable[..., Any]] = {}  # kind -> (job, spec, device, **kw) -> algorithm


def network(kind: str) -> Callable[[Any, Any], Any] | None:
    plugins.load()
    return NETWORKS.get(kind)


def algorithm(kind: str) -> Callable[..., Any] | None:
    plugins.load()
    return ALGORITHMS.get(kind)
