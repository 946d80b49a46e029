"""Numbers an env reports in its `info` that a job wants charted (`logging.info_keys`,
`is_success` by default, as Stable-Baselines3's Monitor records it): the value at
the step an episode ends, one per episode, averaged over episodes by whoever
reports them (samplers over their recent episodes, the evaluator over an
evaluation's)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np


def at_episode_ends(info: Any, ended: Iterable[int], keys: Sequence[str],
                    out: dict[str, list[float]]) -> None:
    """Append to `out[key]` the value a vector env's `info` holds for each env of
    `ended` (where the env reported the key, and it is a number)."""
    if not keys or not isinstance(info, dict):
        return
    idx = list(ended)
    for k in keys:
        if k not in info:
            continue
        vals, mask = info[k], info.get(f"_{k}")
        for i in idx:
            if mask is not None and not mask[i]:
                continue
            v = vals[i]
            if isinstance(v, bool | int | float | np.number | np.bool_):
                out.setdefault(k, []).append(float(v))


def means(values: dict[str, Any], prefix: str) -> dict[str, float]:
    """{prefix + key: the mean of its values} for keys with any."""
    return {f"{prefix}{k}": round(float(np.mean(v)), 4) for k, v in values.items() if len(v)}
