"""The off-policy feed: sampled batches from uniform or prioritised shards.

Each shard link keeps `prefetch` batch requests outstanding; the next request
goes to a shard chosen in proportion to the shards' sizes (a shard left with
none gets one first), so the learner samples the whole replay evenly. After an
update the batch's new priorities go back to the shard it came from, if that
shard is prioritised and still the one connected. Env steps are the sum of what each shard
reports, per shard member (a restarted shard replaces its count), never going
backwards.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from .. import wire
from ..envs.spaces import Leaf, contains_problem, features, gather
from .links import Link, ShardAddress, ShardLinks
from .state import FeedConfig, LinkConfig

if TYPE_CHECKING:  # torch stays out of the feeds' imports
    from ..algos.base import Learned
    from ..envs.spec import EnvSpec

Arrays = Mapping[str, np.ndarray]


def batch_problem(a: Arrays, obs_shape: tuple[int, ...], action_shape: tuple[int, ...],
                  leaves: tuple[Leaf, ...] = ()) -> str:
    """Does a sampled batch have the columns an off-policy update reads? With a
    structured observation's `leaves`, each leaf's columns (`obs.<key>`,
    `next_obs.<key>`) in their dtypes and shapes."""
    try:
        n = a["reward"].shape[0]
        want = {"reward": (n,), "discount": (n,), "weight": (n,), "index": (n,),
                "generation": (n,), "env_steps": (1,), "action": (n, *action_shape)}
        if not leaves:
            want |= {"obs": (n, *obs_shape), "next_obs": (n, *obs_shape)}
    except (KeyError, IndexError) as e:
        return f"missing or misshapen reward: {e}"
    for k, shape in want.items():
        if k not in a or tuple(a[k].shape) != shape:
            return f"{k}: expected shape {shape}"
    if leaves:
        for leaf in leaves:
            for k in (leaf.column, "next_" + leaf.column):
                if k not in a or tuple(a[k].shape) != (n, *leaf.shape) \
                        or a[k].dtype != leaf.dtype:
                    return f"{k}: expected {leaf.dtype} of shape {(n, *leaf.shape)}"
        return contains_problem(gather(a, leaves), leaves) or contains_problem(
            gather(a, leaves, "next_"), leaves) or _finite(a, ("reward", "discount", "weight"))
    return _finite(a, ("obs", "next_obs", "reward", "discount", "weight"))


def _finite(a: Arrays, keys: tuple[str, ...]) -> str:
    for k in keys:
        if k in ("obs", "next_obs") and a[k].dtype == np.uint8:
            continue  # images stay uint8 until the network
        if a[k].dtype.kind != "f" or not np.isfinite(a[k]).all():
            return f"{k} is not finite floats" + (" or uint8 images" if "obs" in k else "")
    return ""


class SampledFeed:
    """Sampled batches for off-policy updates; priorities back to their shard."""

    def __init__(self, links: LinkConfig, spec: EnvSpec, cfg: FeedConfig,
                 rng: np.random.Generator):
        self.links = ShardLinks(links, on_message=self._on)
        self.cfg, self.rng = cfg, rng
        self.obs_shape = tuple(spec.obs_shape)
        self.action_shape = tuple(spec.action_shape)
        self.leaves = spec.leaves if spec.structured else ()
        self.batches: asyncio.Queue[tuple[Link, wire.Batch]] = asyncio.Queue()
        self.shard_steps: dict[str, int] = {}
        self.current: tuple[Link, Arrays] | None = None
        self.rejected = 0
        self.dropped = self.filtered = 0  # sampled batches are never dropped or filtered
        self.draining = False

    def attach(self, tasks: asyncio.TaskGroup) -> None:
        self.links.attach(tasks)

    def env_steps(self, known: int) -> int:
        """The sum of what each shard member last reported; never below `known`
        (a shard restarted from an older snapshot reports less)."""
        return max(known, sum(self.shard_steps.values()))

    async def resync(self) -> None:
        """A wait for the shards stalled: reconnect to each with a fresh window of
        credits (what is pending here is kept; its credits go nowhere)."""
        await self.reconcile(self.links.reset())

    async def reconcile(self, wanted: dict[str, ShardAddress]) -> None:
        for link in self.links.reconcile(wanted):
            link.credit = self.cfg.prefetch
            await self.links.send(link, wire.SampleRequest(credit=link.credit,
                                                           batch_size=self.cfg.batch_size))

    async def _on(self, link: Link, msg: wire.Batch | None) -> None:
        if self.draining:  # training is over: take nothing, ask for nothing more
            return
        if msg is None:  # bad: ask for another
            await self.links.send(link, wire.SampleRequest(credit=1))
            return
        await self.batches.put((link, msg))

    def shards(self) -> list[str]:
        return sorted(self.links.links)

    async def next(self) -> Arrays | None:
        link, msg = await self.batches.get()
        link.credit -= 1
        a = msg.arrays
        why = batch_problem(a, self.obs_shape, self.action_shape, self.leaves)
        if why:
            self.rejected += 1
            self.links.stats.reject(msg.src, wire.WireError(f"bad batch: {why}"))
            await self._request()
            return None
        self.shard_steps[link.member] = int(a["env_steps"][0])
        if "size" in a and a["size"].shape == (1,):
            link.size = max(1, int(a["size"][0]))
        if self.leaves:  # the off-policy networks read the observations' flat features
            a = {**a, "obs": features(gather(a, self.leaves), self.leaves),
                 "next_obs": features(gather(a, self.leaves, "next_"), self.leaves)}
        self.current = (link, a)
        return a

    async def done(self, learned: Learned | None) -> None:
        """Priorities to the batch's shard (if still connected), then the next request."""
        if self.current is not None and learned is not None and learned.priorities is not None \
                and self.cfg.priorities:  # a uniform shard has no use for them
            link, a = self.current
            await self.links.send(link, wire.PriorityUpdate(arrays={
                "index": np.asarray(a["index"]), "generation": np.asarray(a["generation"]),
                "priority": np.asarray(learned.priorities, np.float64)}))
        self.current = None
        await self._request()

    def target(self) -> Link | None:
        """Which connected shard gets the next request."""
        live = self.links.live()
        if len(live) <= 1:
            return live[0] if live else None
        for link in live:
            if link.credit <= 0:
                return link
        sizes = np.array([link.size for link in live], np.float64)
        return live[int(self.rng.choice(len(live), p=sizes / sizes.sum()))]

    async def _request(self) -> None:
        link = self.target()
        if link is not None and await self.links.send(link, wire.SampleRequest(credit=1)):
            link.credit += 1

    def drain(self) -> None:
        self.draining = True

    def metrics(self, r: str) -> dict[str, object]:
        return {f"{r}/fragments_dropped": 0, f"{r}/fragments_rejected": self.rejected,
                f"{r}/shards": len(self.links)}
