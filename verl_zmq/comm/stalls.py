"""Waits on another process, each with a deadline, none silent.

Some waits last as long as they must: a sampler's send blocks while its shards
are full (backpressure), a learner waits for its next batch, a sampler for the
learner's next params. From inside, a slow peer and one that is stopped
(SIGSTOP, a hung host, a lock held forever) look the same. `Stalls.watch`
leaves such a wait as it is but never lets it pass silently: once it has lasted
its deadline it logs `exchange_stalled` (a warning, so the terminal shows the
first), naming the exchange and the peers it waits on; when it ends,
`exchange_resumed` says how long it took.

A deadline comes from the job: twice `launch.liveness_timeout_s` (the time the
registry takes to count a silent member dead), or three times the longest wait
of the exchange that ended in time, if longer (a learner whose updates take a
minute keeps its samplers waiting that long every time). Until a wait of the
exchange has ended after the first (start-up: envs built, models loaded,
first batches), it is ten times the base. A wait that stalled does not
lengthen the deadlines after it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

Peers = Callable[[], list[str]]
SLACK = 3.0  # a deadline is at least this many times the longest wait that ended in time
STARTUP = 10.0  # the first wait's deadline, in base deadlines


class Stalls:
    """One role's watched exchanges: their deadlines, and the stalls logged."""

    def __init__(self, log: Any, base_s: float):
        self.log = log
        self.base_s = base_s
        self.count = 0  # stalls logged (a metric)
        self._longest: dict[str, float] = {}  # exchange -> longest wait that ended in time
        self._ended_n: dict[str, int] = {}  # exchange -> its waits that ended in time
        self._stalled_at: dict[str, float] = {}  # exchanges said stalled, not yet resumed

    def deadline(self, exchange: str) -> float:
        """How long a wait of `exchange` may last before it is said stalled."""
        longest = self._longest.get(exchange)
        if longest is None:
            return STARTUP * self.base_s
        return max(self.base_s, SLACK * longest)

    def _stalled(self, exchange: str, limit: float, peers: list[str]) -> None:
        self.count += 1
        self._stalled_at[exchange] = time.monotonic()
        self.log.warning("exchange_stalled", exchange=exchange, deadline_s=round(limit, 2),
                         waiting_on=peers)

    def _ended(self, exchange: str, waited: float) -> None:
        """A wait ended after `waited` s: a resume where it was said stalled, else a
        measure of how long this exchange's waits take."""
        if self._stalled_at.pop(exchange, None) is not None:
            self.log.info("exchange_resumed", exchange=exchange, waited_s=round(waited, 2))
            return
        n = self._ended_n[exchange] = self._ended_n.get(exchange, 0) + 1
        if n > 1:  # the first wait is start-up's: it says nothing of the pace after it
            self._longest[exchange] = max(self._longest.get(exchange, 0.0), waited)

    @asynccontextmanager
    async def watch(self, exchange: str, peers: Peers,
                    on_stall: Callable[[], None] | None = None) -> AsyncIterator[None]:
        """Run the body as it is; say it stalled once it passes its deadline (and
        call `on_stall` then: a recovery the waiter can try)."""
        limit = self.deadline(exchange)
        t0 = time.monotonic()

        def stalled() -> None:
            self._stalled(exchange, limit, peers())
            if on_stall is not None:
                on_stall()

        handle = asyncio.get_running_loop().call_later(limit, stalled)
        try:
            yield
        finally:
            handle.cancel()
            self._ended(exchange, time.monotonic() - t0)
