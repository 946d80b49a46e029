"""Keeping a long job's launcher at its size.

Under a fault every 15 s the launcher's Python objects stay flat for an hour,
but its resident memory crept up by about 5% (measured with
tools/faults/chaos_soak.py --pairs): memory the allocator had freed and kept,
in the arenas of threads that came and went. Two things bound it:

- children are reaped through pidfds where the kernel has them, instead of
  Python 3.11's default of one waiting thread per child process (every restart
  of a role over SSH started one; Python 3.12 does this by itself);
- every `TRIM_EVERY_S` the freed memory is handed back to the system
  (glibc's `malloc_trim`; nothing on other C libraries).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import sys
import warnings
from collections.abc import Callable, Iterator

TRIM_EVERY_S = 60.0


@contextlib.contextmanager
def reaping_through_pidfds() -> Iterator[bool]:
    """Within: the running loop (the main thread's) reaps its children through
    pidfds, with no thread per child; after, the child watcher that was there
    before, so that a loop in another thread (a notebook's) still has one that
    works there. Yields whether pidfds are in use."""
    if sys.version_info >= (3, 12) or not hasattr(os, "pidfd_open"):
        yield False  # 3.12 picks pidfds itself
        return
    try:
        os.close(os.pidfd_open(os.getpid()))  # the kernel has them (Linux 5.3+)
    except OSError:
        yield False
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        before = asyncio.get_child_watcher()
        watcher = asyncio.PidfdChildWatcher()
        watcher.attach_loop(asyncio.get_running_loop())
        asyncio.set_child_watcher(watcher)
    try:
        yield True
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            asyncio.set_child_watcher(before)  # closes ours


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        fn: Callable[[int], int] = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    return fn


async def trim_loop(every_s: float = TRIM_EVERY_S) -> None:
    """Hand freed heap memory back to the system every `every_s`, until cancelled."""
    trim = _malloc_trim()
    if trim is None:
        return
    while True:
        await asyncio.sleep(every_s)
        with contextlib.suppress(OSError):
            trim(0)
