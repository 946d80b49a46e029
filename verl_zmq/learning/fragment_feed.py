"""The on-policy feed: fragments from FIFO shards under credit-based flow control.

Each shard link holds a window of `prefetch + per_batch` credits: a credit
goes back to its shard when the fragment it brought leaves the learner (used,
dropped for lag, rejected), so a shard's credits, fragments in flight and
fragments pending here always add up to the window, and backpressure reaches
the samplers. The lag check happens once, when a fragment is taken for an
update, oldest first. A fragment filter (dynamic sampling) may drop fragments
and draw more, up to `max_fills` batches per update.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import numpy as np

from .. import batch as fragments
from .. import wire
from .links import Link, ShardAddress, ShardLinks
from .state import FeedConfig, LinkConfig, TrainState

if TYPE_CHECKING:  # torch stays out of the feeds' imports
    from ..algos.base import FragmentFilter, Learned

Arrays = Mapping[str, np.ndarray]


class FragmentFeed:
    """Batches of fresh fragments for on-policy updates. It reads the trainer's
    `state` (the version, for policy lag) and writes none of it."""

    def __init__(self, links: LinkConfig, state: TrainState, layout: fragments.Layout,
                 cfg: FeedConfig, keep: FragmentFilter | None = None,
                 observe: Callable[[Arrays], None] | None = None):
        self.links = ShardLinks(links, on_message=self._on)
        self.state, self.layout, self.cfg = state, layout, cfg
        self.unreported_steps = 0  # env steps received since the trainer last asked
        self.keep = keep  # the algorithm's fragment filter
        self.observe = observe  # sees every accepted fragment (returns, obs statistics)
        # (version, arrays, link, (sampler, its seq)): the last for a fixed order
        self.pending: deque[tuple[int, Arrays, Link, tuple[str, int]]] = deque()
        self.pending_steps = 0
        self.ready = asyncio.Event()
        self.draining = False
        self.dropped = self.rejected = self.filtered = 0
        self.lags: deque[int] = deque(maxlen=200)
        self.by_sampler: dict[str, int] = {}

    def attach(self, tasks: asyncio.TaskGroup) -> None:
        self.links.attach(tasks)

    def env_steps(self, known: int) -> int:
        """`known` plus the env steps of every fragment received since the last call."""
        n, self.unreported_steps = self.unreported_steps, 0
        return known + n

    async def resync(self) -> None:
        """A wait for the shards stalled: reconnect to each with a fresh window of
        credits (what is pending here is kept; its credits go nowhere)."""
        await self.reconcile(self.links.reset())

    async def reconcile(self, wanted: dict[str, ShardAddress]) -> None:
        for link in self.links.reconcile(wanted):
            link.credit = self.cfg.prefetch + self.cfg.per_batch
            await self.links.send(link, wire.SampleRequest(credit=link.credit,
                                                           batch_size=self.cfg.batch_size))

    async def _credit(self, link: Link) -> None:
        await self.links.send(link, wire.SampleRequest(credit=1))

    async def _on(self, link: Link, msg: wire.Batch | None) -> None:
        if self.draining:  # training is over: take nothing, ask for nothing more
            return
        if msg is None:
            await self._credit(link)
            return
        a = msg.arrays
        why = self.layout.problem(a, values=False)  # the shard checked the values
        if why:
            self.rejected += 1
            self.links.stats.reject(msg.sampler or msg.src,
                                    wire.WireError(f"bad fragment: {why}"))
            await self._credit(link)
            return
        n = fragments.steps(a)
        if not self.cfg.ordered:  # ordered: what was trained on, which repeats (_take)
            self.unreported_steps += n  # dropped fragments count too: the envs did step
        src = (msg.sampler or msg.src)[:64]
        if src in self.by_sampler or len(self.by_sampler) < 1024:
            self.by_sampler[src] = self.by_sampler.get(src, 0) + 1
        if self.observe is not None and not self.cfg.ordered:
            self.observe(a)  # ordered: when taken, in order (merged statistics repeat)
        self.lags.append(self.state.version - msg.version)
        self.pending.append((msg.version, a, link, (src, msg.sampler_seq)))
        self.pending_steps += n
        if self.pending_steps >= self.cfg.batch_size:
            self.ready.set()

    async def _wait(self) -> None:
        # level-triggered: a batch already pending is taken without waiting for more
        while self.pending_steps < self.cfg.batch_size:
            self.ready.clear()
            await self.ready.wait()

    async def _take(self) -> list[Arrays]:
        """Oldest-first fragments for one update, too stale ones dropped; [] (and the
        fresh ones kept, with their credits) when not enough fresh data is left."""
        out: list[tuple[int, Arrays, Link, tuple[str, int]]] = []
        got = 0
        while self.pending and got < self.cfg.batch_size:
            version, a, link, _ = item = self.pending.popleft()
            n = fragments.steps(a)
            self.pending_steps -= n
            lag = self.state.version - version
            if lag > self.cfg.max_lag or lag < 0:
                self.dropped += 1
                await self._credit(link)
                continue
            out.append(item)
            got += n
        if got < self.cfg.batch_size:
            self.pending.extendleft(reversed(out))
            self.pending_steps += got
            return []
        for _, _, link, _ in out:
            await self._credit(link)
        if self.cfg.ordered:
            out.sort(key=lambda item: item[3])
            self.unreported_steps += got
            if self.observe is not None:
                for _, a, _, _ in out:
                    self.observe(a)
        return [a for _, a, _, _ in out]

    def shards(self) -> list[str]:
        return sorted(self.links.links)

    async def next(self) -> Arrays | None:
        """The next batch: fragments side by side, [T, sum E, ...]; None when the
        filter left nothing."""
        frags: list[Arrays] = []
        while not frags:
            await self._wait()
            frags = await self._take()
        if self.keep is None:
            return self.layout.concat(frags)
        kept = self._filter(frags)
        drawn, draws = len(frags), 1
        while sum(n for _, n in kept) < self.cfg.batch_size \
                and draws < self.cfg.max_fills:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.cfg.fill_timeout_s):
                    await self._wait()
            more = await self._take()
            if not more:
                break
            draws += 1
            drawn += len(more)
            kept += self._filter(more)
        self.filtered += drawn - len(kept)
        return self.layout.concat([f for f, _ in kept]) if kept else None

    def _filter(self, frags: list[Arrays]) -> list[tuple[Arrays, int]]:
        assert self.keep is not None
        return [k for k in map(self.keep, frags) if k is not None]

    async def done(self, learned: Learned | None) -> None:
        """Fragments' credits went back as they were taken: nothing to return."""

    def drain(self) -> None:
        """Training is over: fragments that still come are dropped and not asked for
        again, so shards fill and samplers stop while the last evaluation runs."""
        self.draining = True

    def metrics(self, r: str) -> dict[str, object]:
        out: dict[str, object] = {f"{r}/fragments_dropped": self.dropped,
                                  f"{r}/fragments_rejected": self.rejected,
                                  f"{r}/shards": len(self.links)}
        if self.keep is not None:
            out[f"{r}/fragments_filtered"] = self.filtered
        if self.by_sampler:
            out[f"{r}/fragments_from"] = dict(self.by_sampler)
        if self.lags:
            out[f"{r}/policy_lag_mean"] = round(float(np.mean(self.lags)), 3)
        return out
