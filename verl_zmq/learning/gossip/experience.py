"""Experience gossip (`gossip.share = "experience"`, with `mixing = "async"`): a
peer trains on its neighbours' fresh experience beside its own, never waiting.

Before each update a peer pushes the batch it is about to learn from to
`neighbor_count` neighbours (chosen afresh by `selection_strategy`; O(N k)
messages an update, whatever N) and widens that batch with the batches that
have arrived since its last update, side by side on the env axis, as a
learner's batch is built from several samplers' fragments. Rollouts shared
across a swarm are what SAPO shares; here they also let every peer reuse, for
its epochs of minibatch steps, the data of `k + 1` peers instead of its own
quarter, which is what the gradient rounds gain by averaging.

A neighbour's steps were taken by its own policy: the importance weight of the
decoupled objective (`algorithm.params.decoupled_loss`) is over those
behaviour log-probabilities, and the clip is anchored at this peer's policy as
the update starts. Arrived batches wait in a bounded queue (`max_queue_size`,
best `priority_fn` first) and one more than `grad_staleness` of its sender's
updates behind the newest batch from that sender is dropped (a backlog after a
stall or a slow link: its behaviour policy is long gone). Parameter pulls and
mixes (`node.py`) keep the peers' policies close, so that shared steps stay
near on-policy.

A neighbour's batch never counts toward this peer's env steps: the group's
count stays each step once. A push that does not fit the job's columns is
refused and counted.
"""

from __future__ import annotations

import asyncio
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from ... import wire
from ...batch import Layout
from . import batch_codec
from .mix_node import MixNode, keep_best, push


@dataclass
class ArrivedBatch:
    """A neighbour's batch, the sender's update it was pushed at, and when it came."""

    src: str
    update: int
    reward: float
    arrays: dict[str, np.ndarray]
    at: float


class ExperienceGossip:
    """One peer's experience sharing; its `GossipNode` owns it."""

    def __init__(self, node: MixNode, choose: Callable[[int], list[str]], layout: Layout):
        self.node, self.choose, self.layout = node, choose, layout
        self.G = node.job.gossip
        self.loop = asyncio.get_running_loop()
        self.lock = threading.Lock()
        self.inbox: deque[ArrivedBatch] = deque()
        self.update = 0
        self.newest: dict[str, int] = {}  # per sender, the newest update it pushed at
        self.own: dict[str, tuple[np.dtype, tuple[int, ...]]] = {}  # a batch's columns
        self.stats = dict.fromkeys(("batch_pushes", "batch_push_dropped", "batch_received",
                                    "batch_used", "batch_stale_dropped", "batch_refused",
                                    "batch_queue_overflow"), 0)
        self.bytes_sent = 0
        self.steps_used = 0  # neighbours' steps trained on
        self.delay_sum = 0.0
        # stochastic rounding of what a compressed push quantises
        self.rng = np.random.default_rng([node.job.experiment.seed, zlib.crc32(node.id.encode())])

    def widen(self, batch: Mapping[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        """Push `batch` to this update's neighbours; return it with what arrived."""
        own = {k: np.ascontiguousarray(v) for k, v in batch.items()}
        self.own = {k: (v.dtype, v.shape) for k, v in own.items()}
        with self.lock:
            came = list(self.inbox)
            self.inbox.clear()
        now = time.monotonic()
        fresh = []
        for a in came:
            # how many of its sender's updates it is behind the newest batch from there
            if self.newest[a.src] - a.update > self.G.grad_staleness:
                self.stats["batch_stale_dropped"] += 1
                continue
            fresh.append(a.arrays)
            self.delay_sum += now - a.at
            self.steps_used += int(a.arrays["reward"].size)
        self.stats["batch_used"] += len(fresh)
        self.update += 1
        msg = wire.GossipBatch(update=self.update, reward=float(self.node.reward()),
                               arrays=batch_codec.encode(own, self.G.compression, self.rng,
                                                         self._lead))
        asyncio.run_coroutine_threadsafe(self._push(msg), self.loop)
        return self.layout.concat([own, *fresh]) if fresh else batch

    async def _push(self, msg: wire.GossipBatch) -> None:
        sent, dropped, nbytes = push(self.node, msg, self.choose(self.update))
        self.stats["batch_pushes"] += sent
        self.stats["batch_push_dropped"] += dropped
        self.bytes_sent += nbytes

    def _lead(self, column: str) -> int:
        """A column's step axes: [T, E, ...] stepwise, [E, ...] a bootstrap or state."""
        return 2 if column in self.layout.stepwise else 1

    def _problem(self, arrays: Mapping[str, np.ndarray]) -> str:
        if not self.own:
            return "no batch of our own yet to compare with"
        if set(arrays) != set(self.own):
            return f"columns {sorted(arrays)} are not {sorted(self.own)}"
        for k, (dt, shape) in self.own.items():
            a = arrays[k]
            # stepwise columns [T, E, ...]; a bootstrap or state column [E, ...]
            axis = self._lead(k) - 1
            if a.dtype != dt or a.ndim != len(shape) or \
                    any(x != y for i, (x, y) in enumerate(zip(a.shape, shape)) if i != axis):
                return f"{k} has {a.dtype}{tuple(a.shape)}, ours {dt}{shape}"
            if a.dtype.kind == "f" and not np.isfinite(a).all():
                return f"{k} is not finite"
        return self.layout.action_problem(arrays["action"])

    def receive(self, src: str, msg: wire.GossipBatch) -> None:
        """A neighbour's batch: queued, or refused (counted)."""
        try:
            arrays = batch_codec.decode(dict(msg.arrays), self.own, self._lead)
            why = self._problem(arrays)
        except ValueError as e:
            arrays, why = {}, str(e)
        if not why and not np.isfinite(msg.reward):
            why = "reward is not finite"
        if why:
            if self.own:
                self.stats["batch_refused"] += 1
                self.node.wire_stats.reject(src, wire.WireError(f"batch push refused: {why}"))
            return
        self.stats["batch_received"] += 1
        with self.lock:
            self.newest[src] = max(self.newest.get(src, msg.update), msg.update)
            self.inbox.append(ArrivedBatch(src, msg.update, float(msg.reward), arrays,
                                           time.monotonic()))
            kept = keep_best(self.inbox, self.G.max_queue_size, self.G.priority_fn)
            if kept is not None:
                self.inbox = kept
                self.stats["batch_queue_overflow"] += 1

    def metrics(self) -> dict[str, float]:
        out: dict[str, float] = {f"gossip/{k}": v for k, v in self.stats.items()}
        n = max(1, self.update)
        out["gossip/batch_bytes_sent"] = self.bytes_sent
        out["gossip/batch_bytes_per_update"] = round(self.bytes_sent / n, 1)
        out["gossip/shared_steps_per_update"] = round(self.steps_used / n, 1)
        if self.stats["batch_used"]:
            out["gossip/batch_queue_delay_ms"] = round(
                1000 * self.delay_sum / self.stats["batch_used"], 3)
        return out
