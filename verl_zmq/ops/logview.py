"""`verl logs`: merge every role's JSON log of a run by time, filter, tail."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import click

from ..log import LEVELS, readable


@dataclass
class LogFilter:
    """Which lines to show."""

    roles: set[str] = field(default_factory=set)
    level: str | None = None
    events: set[str] = field(default_factory=set)

    def __call__(self, ev: dict) -> bool:
        if self.roles and ev.get("role") not in self.roles and ev.get("id") not in self.roles:
            return False
        if self.level and LEVELS.get(ev.get("level", "info"), 20) < LEVELS.get(self.level, 0):
            return False
        return not (self.events and ev.get("event") not in self.events)


def members(run_dir: Path) -> set[str]:
    """The member ids that have a log in the run folder (and "launcher")."""
    return {p.stem for p in (run_dir / "logs").glob("*.jsonl")}


class _Tail:
    """Reads the complete lines appended to one file since the last call."""

    def __init__(self, path: Path):
        self.path = path
        self.pos = 0
        self.rest = b""

    def read(self) -> list[dict]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.pos)
                data = f.read()
                self.pos = f.tell()
        except OSError:
            return []
        lines = (self.rest + data).split(b"\n")
        self.rest = lines.pop()
        out = []
        for raw in lines:
            try:
                ev = json.loads(raw)
            except ValueError:
                ev = {"ts": 0.0, "level": "info", "event": "raw_output",
                      "id": self.path.stem, "text": raw.decode("utf-8", "replace")}
            if isinstance(ev, dict) and raw.strip():
                out.append(ev)
        return out


def read_events(run_dir: Path) -> list[dict]:
    """Every log event of a run, merged by time."""
    events = []
    for p in sorted((run_dir / "logs").glob("*.jsonl")):
        events.extend(_Tail(p).read())
    events.sort(key=lambda e: e.get("ts", 0.0) if isinstance(e.get("ts"), int | float) else 0.0)
    return events


def show(run_dir: Path, flt: LogFilter, follow: bool = False, as_json: bool = False) -> None:
    tails: dict[Path, _Tail] = {}
    while True:
        for p in sorted((run_dir / "logs").glob("*.jsonl")):
            tails.setdefault(p, _Tail(p))
        batch = [e for t in tails.values() for e in t.read() if flt(e)]
        batch.sort(key=lambda e: e.get("ts", 0.0) if isinstance(e.get("ts"), int | float)
                   else 0.0)
        for ev in batch:
            click.echo(json.dumps(ev) if as_json else readable(ev))
        if not follow:
            return
        time.sleep(0.5)
