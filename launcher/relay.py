"""A remote role's output, relayed by the launcher into its log files.

A role started over SSH (or srun) writes its JSON lines to the ssh client's
stdout. Were that stdout the log file itself, a full disk would end the log for
good: the client gives up on a failed write, and the role's later lines, after
the disk has room again, have nowhere to go. The launcher reads them instead and
never stops reading (the role is never blocked on its output); a write that
fails drops what it held, counted, and is tried again every RETRY_S. When the
file takes lines again, a `log_gap` line says how many bytes were lost.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

CHUNK = 1 << 16


class LogRelay:
    """Copies one stream of a role's output into `path`, across failed writes.
    `on_error(path, error)` is told once per failure (the launcher warns on the
    terminal); `on_back(path, lost_bytes)` once the file takes lines again."""

    RETRY_S = 5.0

    def __init__(self, path: Path, member: str,
                 on_error: Callable[[Path, OSError], None] | None = None,
                 on_back: Callable[[Path, int], None] | None = None):
        self.path = path
        self.member = member
        self.on_error = on_error
        self.on_back = on_back
        self.lost = 0  # bytes dropped since the failure, while `failed`
        self.failed = False
        self.retry_at = 0.0

    async def run(self, reader: asyncio.StreamReader) -> None:
        """Until the role's output ends."""
        while chunk := await reader.read(CHUNK):
            self.write(chunk)

    def write(self, data: bytes) -> None:
        if self.failed and time.monotonic() < self.retry_at:
            self.lost += len(data)
            return
        if self.failed and not self._resume():
            self.lost += len(data)
            return
        self._append(data)

    def _resume(self) -> bool:
        """After a failure: a line that ends whatever was cut short and says what
        was lost; False while the file still refuses it."""
        gap = json.dumps({"ts": round(time.time(), 6), "level": "warning", "event": "log_gap",
                          "id": self.member, "bytes_lost": self.lost,
                          "reason": "the log file could not be written"})
        if not self._append(b"\n" + gap.encode() + b"\n", ours=True):
            return False
        lost, self.lost, self.failed = self.lost, 0, False
        if self.on_back is not None:
            self.on_back(self.path, lost)
        return True

    def _append(self, data: bytes, ours: bool = False) -> bool:
        """Write all of `data` (O_APPEND, unbuffered: a failure loses only what
        was not written); False, and the failure noted, when it could not."""
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as e:
            self._fail(e, 0 if ours else len(data))
            return False
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            return True
        except OSError as e:
            self._fail(e, 0 if ours else len(view))
            return False
        finally:
            os.close(fd)

    def _fail(self, e: OSError, unwritten: int) -> None:
        first = not self.failed
        self.failed, self.retry_at = True, time.monotonic() + self.RETRY_S
        self.lost += unwritten
        if first and self.on_error is not None:
            self.on_error(self.path, e)


def relay_events(log: Any) -> tuple[Callable[[Path, OSError], None], Callable[[Path, int], None]]:
    """The launcher's `on_error` and `on_back`: a refused write (a full disk) is a
    warning on the terminal; the file taking lines again, with what was lost."""

    def unwritable(path: Path, e: OSError) -> None:
        log.warning("role_log_unwritable", path=path.name, error=e.strerror or str(e),
                    errno=errno.errorcode.get(e.errno or 0, ""))

    def writable(path: Path, lost: int) -> None:
        log.info("role_log_writable", path=path.name, bytes_lost=lost)

    return unwritable, writable
