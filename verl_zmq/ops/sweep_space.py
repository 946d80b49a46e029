"""A sweep's search-space file (TOML), read and checked before any trial starts.

    [space]
    algorithm.params.learning_rate = {low = 1e-4, high = 3e-3, log = true}
    algorithm.params.ent_coef = {low = 0.0, high = 0.02}
    algorithm.params.n_epochs = {low = 2, high = 10, int = true}
    algorithm.params.batch_size = {choices = [256, 512, 1024]}

    [objective]
    metric = "steps_to_target"   # or "best_return", "final_return"
    target = 475.0               # steps_to_target: the return to reach

Each parameter is a job key (`section.key`, dotted as in `--set`) with a range
(`low`, `high`, optional `log` and `int`) or a list of `choices`. Every key is
checked against the job with its low and high (or each choice) set, so a key
that does not exist or a value the job refuses is named before anything runs.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import ConfigError, load_job

METRICS = ("steps_to_target", "best_return", "final_return")


@dataclass(frozen=True)
class Param:
    """One searched job key."""

    key: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    integer: bool = False
    choices: tuple[Any, ...] = ()

    def suggest(self, trial: Any) -> Any:
        """This parameter's value for an Optuna trial."""
        if self.choices:
            return trial.suggest_categorical(self.key, list(self.choices))
        if self.integer:
            return trial.suggest_int(self.key, int(self.low or 0), int(self.high or 0),
                                     log=self.log)
        return trial.suggest_float(self.key, float(self.low or 0.0), float(self.high or 0.0),
                                   log=self.log)


@dataclass(frozen=True)
class Space:
    """A sweep's parameters and objective."""

    params: list[Param]
    metric: str = "steps_to_target"
    target: float | None = None
    extra: list[str] = field(default_factory=list)  # --set overrides every trial takes

    @property
    def minimize(self) -> bool:
        return self.metric == "steps_to_target"


def _leaves(d: dict[str, Any], prefix: str = "") -> dict[str, dict[str, Any]]:
    """{dotted key: its table} for every table that is a parameter."""
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if not isinstance(v, dict):
            raise ConfigError(f"space.{key}: expected a table {{low, high}} or "
                              f"{{choices = [...]}}, got {v!r}")
        if {"low", "high", "choices"} & v.keys():
            out[key] = v
        else:
            out.update(_leaves(v, key + "."))
    return out


def _param(key: str, t: dict[str, Any], where: str) -> Param:
    extra = set(t) - {"low", "high", "log", "int", "choices"}
    if extra:
        raise ConfigError(f"{where}: unknown {sorted(extra)} (a parameter takes low, high, "
                          f"log, int, or choices)")
    if "choices" in t:
        if not isinstance(t["choices"], list) or not t["choices"] or {"low", "high"} & t.keys():
            raise ConfigError(f"{where}: choices is a non-empty list, without low and high")
        return Param(key, choices=tuple(t["choices"]))
    low, high = t.get("low"), t.get("high")
    if not all(isinstance(x, int | float) and not isinstance(x, bool) for x in (low, high)):
        raise ConfigError(f"{where}: low and high are numbers, got {low!r} and {high!r}")
    assert isinstance(low, int | float) and isinstance(high, int | float)
    if not low < high:
        raise ConfigError(f"{where}: low ({low}) must be below high ({high})")
    if t.get("log") and low <= 0:
        raise ConfigError(f"{where}: a log range needs low > 0, got {low}")
    return Param(key, float(low), float(high), bool(t.get("log", False)),
                 bool(t.get("int", False)))


def load_space(path: str | Path, job_path: str | Path, extra: list[str] | None = None
               ) -> Space:
    """Read and check a space file against the job (ConfigError names the file,
    the key and the fix)."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"{path}: cannot read the space file: {e}") from None
    unknown = set(raw) - {"space", "objective"}
    if unknown:
        raise ConfigError(f"{path}: unknown sections {sorted(unknown)} (a space file has "
                          f"[space] and [objective])")
    if not raw.get("space"):
        raise ConfigError(f"{path}: [space] names no parameter (e.g. "
                          f"algorithm.params.learning_rate = {{low = 1e-4, high = 1e-2, "
                          f"log = true}})")
    try:
        params = [_param(k, t, f"{path}: space.{k}") for k, t in _leaves(raw["space"]).items()]
    except ConfigError as e:
        raise ConfigError(str(e) if str(e).startswith(str(path)) else f"{path}: {e}") from None
    obj = raw.get("objective", {})
    metric = obj.get("metric", "steps_to_target")
    if metric not in METRICS:
        raise ConfigError(f"{path}: objective.metric = {metric!r}: choose from "
                          f"{', '.join(METRICS)}")
    extra = list(extra or [])
    job = load_job(job_path, extra)
    for p in params:  # every key exists and takes its extremes
        for v in p.choices or (p.low, p.high):
            value = int(v) if p.integer and v is not None else v
            try:
                load_job(job_path, [*extra, f"{p.key}={json.dumps(value)}"])
            except ConfigError as e:
                raise ConfigError(f"{path}: space.{p.key} = {value!r}: {e}") from None
    target = obj.get("target", job.evaluation.stop_at_return)
    if metric == "steps_to_target" and not isinstance(target, int | float):
        raise ConfigError(f"{path}: objective.target: steps_to_target needs the return to "
                          f"reach, a number (or set evaluation.stop_at_return in the job)")
    return Space(params, metric, None if target is None else float(target), extra)
