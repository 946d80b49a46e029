"""Structured logs: one JSON object a line on stdout (or a file), and a readable
line on stderr when it is a terminal. Every line carries ts, level, event,
role, id, group, incarnation, host, pid.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import time
from typing import IO, Any

import structlog

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
          "error": logging.ERROR}


def _json_default(o: Any):
    try:
        import numpy as np

        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, np.ndarray):
            return o.tolist()
    except ImportError:  # pragma: no cover
        pass
    return str(o)


def _add_ts(_, __, ev: dict) -> dict:
    ev["ts"] = round(time.time(), 6)
    return ev


def readable(ev: dict) -> str:
    """One line a person can read: time, level, who, event, fields."""
    ts = ev.get("ts", 0.0)
    stamp = time.strftime("%H:%M:%S", time.localtime(ts)) + f".{int((ts % 1) * 1000):03d}"
    who = ev.get("id", "?")
    skip = {"ts", "level", "event", "role", "id", "group", "incarnation", "host", "pid"}
    rest = " ".join(f"{k}={_short(v)}" for k, v in ev.items() if k not in skip)
    return f"{stamp} {ev.get('level', '?')[:4]:4} {who:<14} {ev.get('event', '')} {rest}".rstrip()


def _short(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    s = str(v)
    return s if len(s) < 200 else s[:197] + "..."


class _Tee:
    """Render JSON for the stream; also print a readable line on a terminal stderr."""

    def __init__(self, tty: bool):
        self.tty = tty

    def __call__(self, _, __, ev: dict) -> str:
        if self.tty:
            print(readable(ev), file=sys.stderr, flush=True)
        return json.dumps(ev, default=_json_default, separators=(",", ":"))


def setup_logging(role: str, member_id: str, group: str = "main", incarnation: int = 0,
                  level: str = "info", stream: IO[str] | None = None,
                  host: str | None = None) -> structlog.typing.FilteringBoundLogger:
    """Configure structlog for this process and return the role's bound logger."""
    out = stream or sys.stdout
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            _add_ts,
            structlog.processors.dict_tracebacks,
            _Tee(tty=sys.stderr.isatty() and out is not sys.stderr),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(LEVELS.get(level, logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )
    return structlog.get_logger().bind(
        role=role, id=member_id, group=group, incarnation=incarnation,
        host=host or socket.gethostname(), pid=os.getpid(),
    )


def get_logger(**ctx) -> structlog.typing.FilteringBoundLogger:
    return structlog.get_logger().bind(**ctx)
