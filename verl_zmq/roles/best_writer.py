"""best.pt written behind the evaluator's evaluations: a write may take seconds
(the first imports torch where the evaluator was not forked with it), and the
evaluations due meanwhile must not wait for it. The newest best waiting for
each path is written next (a multi-agent job keeps one per trained policy); the
others are passed over."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from ..log import write_failed


def write_best(path: Path, job_text: str, algorithm: str, policy: dict[str, Any],
               rms: dict[str, Any] | None, meta: dict[str, Any]) -> None:
    from ..checkpoint import policy_state, save_atomic  # torch: first needed here

    save_atomic(policy_state(job_text, algorithm, policy, rms, **meta), path)


class BestWriter:
    """One evaluator's best.pt files, written in a thread, newest first."""

    def __init__(self, log: Any):
        self.log = log
        self.next: dict[Any, tuple[Any, ...]] = {}  # path -> its contents, not yet written
        self.task: asyncio.Task[None] | None = None

    def keep(self, what: tuple[Any, ...]) -> None:
        """Write `what` (path, job text, algorithm, policy, rms, meta) once the write
        under way, if any, is done."""
        self.next[what[0]] = what
        if self.task is None or self.task.done():
            self.task = asyncio.create_task(self._write())

    async def _write(self) -> None:
        while self.next:
            _, (path, *what) = self.next.popitem()
            try:
                await asyncio.to_thread(write_best, path, *what)
            except OSError as e:
                write_failed(self.log, "best_model_failed", path, e, "keeping the last best.pt")

    async def done(self) -> None:
        """Wait until the last best is on disk."""
        if self.task is not None:
            await self.task
