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
from collections import deque
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
    later lines go to stderr as well. What the log could not take is kept (up to
    BACKLOG bytes; beyond that the oldest is dropped and counted), and every
    RETRY_S the log is tried again: once the disk has room, the kept lines are
    written first, in order, and the log goes on (said on stderr, with what was
    dropped). So a fault that fills the disk leaves no hole in the record of what
    happened meanwhile (the launcher's `host_back`, a role's restarts). A stream
    with a file descriptor is written with os.write, so what a failed write left
    unwritten is known to the byte (a buffered stream would hold the failed line
    and write it again). A role keeps working; a launcher still stops."""

    RETRY_S = 5.0
    BACKLOG = 4 << 20  # bytes kept while the log refuses them

    def __init__(self, stream: IO[str]):
        self.stream = stream
        self.failed: OSError | None = None
        self.retry_at = 0.0
        self.kept: deque[bytes] = deque()
        self.kept_bytes = 0
        self.dropped = 0  # bytes dropped from the backlog since the failure
        self.kept_lines = 0  # lines kept since the failure
        try:
            stream.flush()
            self.fd: int | None = stream.fileno()
        except (OSError, ValueError, AttributeError):  # io.UnsupportedOperation included
            self.fd = None

    def _put(self, data: bytes) -> tuple[bytes, OSError | None]:
        """Write `data`: (what was left unwritten, the error) when a write fails."""
        try:
            self.stream.flush()  # anything written to the stream itself goes first
            if self.fd is None:
                self.stream.write(data.decode(errors="replace"))
                self.stream.flush()
                return b"", None
        except OSError as e:
            # a stream without a descriptor may have taken part of it: end that line
            return (data if self.fd is not None else b"\n" + data), e
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.fd, view):]
            except OSError as e:
                return bytes(view), e
        return b"", None

    def _keep(self, data: bytes) -> None:
        self.kept.append(data)
        self.kept_bytes += len(data)
        while self.kept_bytes > self.BACKLOG and len(self.kept) > 1:
            old = self.kept.popleft()
            self.kept_bytes -= len(old)
            self.dropped += len(old)

    def _try_again(self) -> None:
        self.retry_at = time.monotonic() + self.RETRY_S
        while self.kept:
            rest, e = self._put(self.kept[0])
            if e is not None:
                self.kept_bytes -= len(self.kept[0]) - len(rest)
                self.kept[0] = rest
                return
            self.kept_bytes -= len(self.kept.popleft())
        lines, dropped = self.kept_lines, self.dropped
        self.failed, self.kept_bytes, self.kept_lines, self.dropped = None, 0, 0, 0
        self._say(f"the log {_stream_name(self.stream)} is writable again: {lines} lines "
                  f"kept meanwhile written to it"
                  f"{f', {dropped} bytes dropped (over the backlog)' if dropped else ''}"
                  f"; logging there from now\n")

    def write(self, text: str) -> int:
        if self.failed is not None and time.monotonic() >= self.retry_at:
            self._try_again()
        data = text.encode()
        if self.failed is None:
            data, e = self._put(data)
            if e is None:
                return len(text)
            self.failed, self.retry_at = e, time.monotonic() + self.RETRY_S
            self._say(f"error: cannot write the log {_stream_name(self.stream)}: "
                      f"{e.strerror or e} ({errno_name(e)}); logging to stderr "
                      f"until it takes lines again, and to the log then\n")
        self._keep(data)
        self.kept_lines += text.count("\n")
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
