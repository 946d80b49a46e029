"""`verl runs`: the runs under a folder, from their summary.json and resolved
job.toml, as a table; `--compare` shows how their jobs differ and their results
side by side."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path


@dataclass
class RunInfo:
    """One run folder, as its files describe it."""

    path: Path
    summary: dict
    job: dict

    @property
    def status(self) -> str:
        """The summary's status; without one "running" (its launcher is alive),
        "killed" (it is gone) or, for a run that left no marker, "unknown"."""
        if "status" in self.summary:
            return str(self.summary["status"])
        alive = launcher_alive(self.path)
        return "unknown" if alive is None else "running" if alive else "killed"

    def get(self, key: str, default="-"):
        v = self.summary.get(key)
        return default if v is None else v


RUNNING = "running.json"  # in a run folder while its launcher runs: {pid, host, registry}


def mark_running(run_dir: Path, registry: str) -> None:
    """Say that this process runs the job of `run_dir` (removed by `clear_running`)."""
    with contextlib.suppress(OSError):
        (run_dir / RUNNING).write_text(json.dumps(
            {"pid": os.getpid(), "host": socket.gethostname(), "registry": registry}))


def clear_running(run_dir: Path) -> None:
    with contextlib.suppress(OSError):
        (run_dir / RUNNING).unlink()


def launcher_alive(run_dir: Path) -> bool | None:
    """Whether the launcher that marked `run_dir` still runs; None where no marker
    says (a finished run, or one from before markers), or it ran on another host
    (True: it may)."""
    m = _load_json(run_dir / RUNNING)
    if not isinstance(m.get("pid"), int):
        return None
    if m.get("host") != socket.gethostname():
        return True
    try:
        os.kill(m["pid"], 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def find_runs(root: Path, max_depth: int = 4) -> list[RunInfo]:
    """Every folder under `root` (itself included) holding a plan.json, oldest first."""
    out = []
    for plan in _walk(root, max_depth):
        d = plan.parent
        summary = _load_json(d / "summary.json")
        try:
            job = tomllib.loads((d / "job.toml").read_text())
        except (OSError, tomllib.TOMLDecodeError):
            job = {}
        if "started" not in summary:
            summary["started"] = plan.stat().st_mtime
        out.append(RunInfo(d, summary, job))
    return sorted(out, key=lambda r: r.summary["started"])


def _walk(root: Path, depth: int):
    if (root / "plan.json").exists():
        yield root / "plan.json"
        return
    if depth == 0 or not root.is_dir():
        return
    for child in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        yield from _walk(child, depth - 1)


def _load_json(path: Path) -> dict:
    try:
        v = json.loads(path.read_text())
        return v if isinstance(v, dict) else {}
    except (OSError, ValueError):
        return {}


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:,.1f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


def table(runs: list[RunInfo], root: Path) -> str:
    head = ("run", "experiment", "started", "env", "algo", "status", "env steps", "best eval",
            "wall s")
    rows = []
    for r in runs:
        job = r.job
        rows.append((
            str(r.path.relative_to(root)) if r.path.is_relative_to(root) else str(r.path),
            job.get("experiment", {}).get("name", r.get("experiment")),
            time.strftime("%Y-%m-%d %H:%M", time.localtime(r.summary["started"])),
            job.get("environment", {}).get("id", r.get("env_id")),
            job.get("algorithm", {}).get("name", r.get("algorithm")),
            r.status, _fmt(r.get("env_steps")), _fmt(r.get("best_eval_return")),
            _fmt(r.get("wall_s"))))
    return _grid(head, rows)


def _grid(head: tuple, rows: list[tuple]) -> str:
    cols = list(zip(head, *rows)) if rows else [(h,) for h in head]
    widths = [max(len(str(x)) for x in c) for c in cols]
    lines = ["  ".join(str(x).ljust(w) for x, w in zip(head, widths))]
    lines += ["  ".join(str(x).ljust(w) for x, w in zip(row, widths)) for row in rows]
    return "\n".join(line.rstrip() for line in lines)


def flatten(d: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def compare(runs: list[RunInfo]) -> str:
    """The job keys whose values differ, then the results, one column per run."""
    flat = [flatten(r.job) for r in runs]
    keys = sorted({k for f in flat for k in f})
    diff = [k for k in keys if len({json.dumps(f.get(k), sort_keys=True) for f in flat}) > 1]
    names = [r.path.name if len({x.path.name for x in runs}) == len(runs) else str(r.path)
             for r in runs]
    head = ("key", *names)
    rows = [(k, *(json.dumps(f.get(k, "-")) if k in f else "-" for f in flat)) for k in diff]
    results = ("status", "env_steps", "best_eval_return", "final_eval_return", "wall_s",
               "restarts", "fragments_dropped")
    rows += [(f"result: {k}", *(_fmt(r.get(k)) for r in runs)) for k in results]
    if not diff:
        rows.insert(0, ("(jobs identical)", *("" for _ in runs)))
    return _grid(head, rows)
