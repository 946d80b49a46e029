"""Structured logs: one JSON object a line on stdout (or a file), and a readable
line on stderr when it is a terminal. Every line carries ts, level, event,
role, id, group, incarnation, host, pid.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import socket
import sys
import time
from collections.abc import Callable
from typing import IO, Any


def _import_structlog() -> Any:
    """structlog, without the console renderer's rich: structlog imports rich
    where it is installed, for pretty console tracebacks these logs never render
    (a traceback here is a dict in a JSON line), which is 0.1 s of a core in every
    role's start and the launcher's. rich stays importable afterwards."""
    if "rich" in sys.modules or "structlog" in sys.modules:
        import structlog
        return structlog
    sys.modules["rich"] = None  # type: ignore[assignment]  # `import rich` fails
    try:
        import structlog
    finally:
        del sys.modules["rich"]
    return structlog


structlog = _import_structlog()

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
          "error": logging.ERROR}


def _json_default(o: Any) -> Any:
    try:
        import numpy as np

        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, np.ndarray):
            return o.tolist()
    except ImportError:  # pragma: no cover
        pass
    return str(o)


def _add_ts(_: Any, __: str, ev: dict[str, Any]) -> dict[str, Any]:
    ev["ts"] = round(time.time(), 6)
    return ev


def readable(ev: dict[str, Any]) -> str:
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
    """Render JSON for the stream; also hand each event to `echo` (the launcher's
    terminal), or print a readable line on a terminal stderr."""

    def __init__(self, tty: bool, echo: Callable[[dict[str, Any]], None] | None = None):
        self.tty = tty
        self.echo = echo

    def __call__(self, _: Any, __: str, ev: dict[str, Any]) -> str:
        if self.echo is not None:
            self.echo(ev)
        elif self.tty:
            print(readable(ev), file=sys.stderr, flush=True)
        return json.dumps(ev, default=_json_default, separators=(",", ":"))


def _stream_name(stream: IO[str]) -> str:
    """Where a stream writes: its file's path (stdout redirected to a log file is
    named by /proc), else its name."""
    try:
        return os.readlink(f"/proc/self/fd/{stream.fileno()}")
    except (OSError, ValueError, AttributeError):
        return str(getattr(stream, "name", stream))


class SafeStream:
    """A log stream that never raises: the first write that fails (a full disk:
    ENOSPC, or EIO) prints one line on stderr naming the path and the error, and
    later lines go to stderr instead, or nowhere when stderr fails too. Every
    RETRY_S the log itself is tried again: once the disk has room, the lines go
    there again (said on stderr). A role keeps working; a launcher still stops."""

    RETRY_S = 5.0

    def __init__(self, stream: IO[str]):
        self.stream = stream
        self.failed: OSError | None = None
        self.retry_at = 0.0

    def _try_again(self) -> None:
        self.retry_at = time.monotonic() + self.RETRY_S
        try:
            self.stream.write("\n")  # ends a line the failure may have cut short
            self.stream.flush()
        except OSError:
            return
        self.failed = None
        self._say(f"the log {_stream_name(self.stream)} is writable again: "
                  f"logging there from now\n")

    def write(self, text: str) -> int:
        if self.failed is not None and time.monotonic() >= self.retry_at:
            self._try_again()
        if self.failed is None:
            try:
                n = self.stream.write(text)
                self.stream.flush()
                return n
            except OSError as e:
                self.failed, self.retry_at = e, time.monotonic() + self.RETRY_S
                self._say(f"error: cannot write the log {_stream_name(self.stream)}: "
                          f"{e.strerror or e} ({errno_name(e)}); logging to stderr "
                          f"until it takes lines again\n")
        if self.stream is not sys.stderr:
            self._say(text)
        return len(text)

    @staticmethod
    def _say(text: str) -> None:
        try:
            sys.stderr.write(text)
            sys.stderr.flush()
        except OSError:
            pass  # nowhere left to say it: keep working

    def flush(self) -> None:
        if self.failed is None:
            try:
                self.stream.flush()
            except OSError as e:
                self.failed, self.retry_at = e, time.monotonic() + self.RETRY_S

    def isatty(self) -> bool:
        return False


def write_failed(log: Any, event: str, path: Any, e: OSError, then: str) -> None:
    """A file a role could not write (a checkpoint, a snapshot): one plain line on
    stderr naming the path and the error, and the same as a structured event."""
    SafeStream._say(f"error: cannot write {path}: {e.strerror or e} ({errno_name(e)}); "
                    f"{then}\n")
    log.error(event, path=str(path), error=str(e), errno=errno_name(e), then=then)


def errno_name(e: OSError) -> str:
    return errno.errorcode.get(e.errno or 0, str(e.errno))


def setup_logging(role: str, member_id: str, group: str = "main", incarnation: int = 0,
                  level: str = "info", stream: IO[str] | None = None,
                  host: str | None = None, echo: Callable[[dict[str, Any]], None] | None = None
                  ) -> Any:
    """Configure structlog for this process and return the role's bound logger
    (through `SafeStream`: a log that cannot be written never stops a process).
    `echo` sees every event as well (the launcher's terminal decides what shows)."""
    out = SafeStream(stream or sys.stdout)
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            _add_ts,
            structlog.processors.dict_tracebacks,
            _Tee(tty=sys.stderr.isatty() and out.stream is not sys.stderr, echo=echo),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(LEVELS.get(level, logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )
    return structlog.get_logger().bind(  # a FilteringBoundLogger (structlog's typing)
        role=role, id=member_id, group=group, incarnation=incarnation,
        host=host or socket.gethostname(), pid=os.getpid(),
    )


def get_logger(**ctx: Any) -> Any:
    return structlog.get_logger().bind(**ctx)
