"""Writing a job back as TOML (the run folder's `job.toml`, the resolved job a
role receives): a small writer for what job files hold."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from .sections import Job


def job_to_dict(job: Job) -> dict[str, Any]:
    """The job as plain TOML-able data (None values left out)."""

    def strip(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: strip(x) for k, x in v.items() if x is not None}
        if isinstance(v, list):
            return [strip(x) for x in v]
        return v

    out: dict[str, Any] = strip(dataclasses.asdict(job))
    return out


def dumps_toml(data: dict[str, Any]) -> str:
    """A small TOML writer for what job files hold (scalars, arrays, tables)."""
    lines: list[str] = []

    def emit(table: dict[str, Any], path: list[str]) -> None:
        scalars = {k: v for k, v in table.items() if not isinstance(v, dict)}
        subs = {k: v for k, v in table.items() if isinstance(v, dict)}
        if path and (scalars or not subs):
            lines.append(f"[{'.'.join(_tkey(p) for p in path)}]")
        for k, v in scalars.items():
            lines.append(f"{_tkey(k)} = {toml_value(v)}")
        if path and (scalars or not subs):
            lines.append("")
        for k, v in subs.items():
            emit(v, path + [k])

    emit(data, [])
    return "\n".join(lines).rstrip() + "\n"


def _tkey(k: str) -> str:
    return k if k.replace("_", "").replace("-", "").isalnum() else toml_value(k)


def toml_value(v: Any) -> str:
    """A Python value as a TOML literal (what a job file and `--set` take)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if isinstance(v, list | tuple):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{_tkey(k)} = {toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def dumps_job(job: Job) -> str:
    return dumps_toml(job_to_dict(job))
