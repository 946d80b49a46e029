"""Running the launcher's event loop from wherever a launch is asked for.

`verl-launch` runs it in its main thread with no loop of its own, where
`asyncio.run` and signal handlers work. `verl_zmq.train` may also be called
inside a running event loop (a Jupyter kernel) or from a thread, where
`asyncio.run` refuses and signal handlers cannot be installed: there the loop
runs in a thread of its own while the caller's thread waits, and a
KeyboardInterrupt there (a notebook's interrupt) is passed to the loop as the
command line's Ctrl-C would be.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def own_thread() -> bool:
    """Whether `asyncio.run` and signal handlers work here: the main thread, no
    event loop running in it."""
    if threading.current_thread() is not threading.main_thread():
        return False
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return True
    return False


def run_loop(main: Callable[[bool], Coroutine[Any, Any, T]],
             interrupt: Callable[[], None] | None = None) -> T:
    """`main(signals)` run to its end: here when `own_thread()` (with `signals`
    True: it may install handlers), else in a new thread (False), each
    KeyboardInterrupt of the waiting caller handed to `interrupt` (called from
    that loop's thread) instead of ending the wait."""
    if own_thread():
        return asyncio.run(main(True))
    out: dict[str, Any] = {}
    ready = threading.Event()
    loops: list[asyncio.AbstractEventLoop] = []

    async def body() -> T:
        loops.append(asyncio.get_running_loop())
        ready.set()
        return await main(False)

    def target() -> None:
        try:
            out["value"] = asyncio.run(body())
        except BaseException as e:  # raised again in the caller's thread
            out["error"] = e
        finally:
            ready.set()

    t = threading.Thread(target=target, name="verl-launch-loop", daemon=True)
    t.start()
    while t.is_alive():
        try:
            t.join(0.2)
        except KeyboardInterrupt:
            ready.wait()
            if interrupt is not None and loops and not loops[0].is_closed():
                # a loop closed meanwhile (RuntimeError): the job has ended
                with contextlib.suppress(RuntimeError):
                    loops[0].call_soon_threadsafe(interrupt)
    if "error" in out:
        raise out["error"]
    return out["value"]  # type: ignore[no-any-return]
