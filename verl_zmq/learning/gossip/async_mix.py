"""Asynchronous gradient gossip (`gossip.mixing = "async"`, the default): no
barrier, no peer ever waits on another.

After each backward pass a peer pushes its minibatch's gradient, compressed
(`grad_codec.py`), to `gossip.neighbor_count` neighbours chosen afresh by
`selection_strategy` (O(N k) messages a step, whatever N), and steps at once on
the mean of its own gradient and the neighbours' gradients that have arrived
since its last step, as AD-PSGD averages with whoever has answered (Lian et al.
2018), one step delayed: what a neighbour computed while we computed ours is
used at our next step. What arrives waits in a bounded queue
(`max_queue_size`, best `priority_fn` first: the most recent, or the pushes of
peers with the best recent return); a gradient that has waited through more
than `grad_staleness` of this peer's updates is dropped, and the others count
1 / (1 + the updates it waited through). Parameters stay close through the
pull exchanges every `update_interval` updates and the mixes every
`sync_interval` (`node.py`); a peer far behind its neighbours (a restart, a
stall) adopts the freshest parameters it received instead of mixing.

A slow or stopped peer therefore costs the others only its missing gradients:
their steps never wait for it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from ... import wire
from ...policy.nets import flat_grad, set_flat_grad
from . import grad_codec
from .mix_node import MixNode, keep_best, push


@dataclass
class Arrived:
    """A neighbour's gradient, decoded, and when it came."""

    src: str
    update: int  # the receiver's update when it came
    reward: float
    grad: np.ndarray
    at: float  # time.monotonic() on arrival
    sent: float  # the sender's clock when it pushed (queue delay: same host only)


class AsyncGradMixer:
    """One peer's asynchronous gradient gossip; its `GossipNode` owns it."""

    def __init__(self, node: MixNode, choose: Callable[[int], list[str]],
                 rng: np.random.Generator):
        G = node.job.gossip
        self.node, self.choose = node, choose
        self.G = G
        self.encoder = grad_codec.GradEncoder(G.compression, rng, G.topk_fraction)
        self.loop = asyncio.get_running_loop()
        self.lock = threading.Lock()  # the inbox: filled on the loop, drained in the update
        self.inbox: deque[Arrived] = deque()
        self.update = 0
        self.steps = 0
        self.size = 0  # the gradient's length, once known
        self.stats = dict.fromkeys(("grad_pushes", "grad_push_dropped", "grad_received",
                                    "grad_used", "grad_stale_dropped", "grad_pushes_refused",
                                    "grad_queue_overflow"), 0)
        self.bytes_sent = 0
        self.bytes_raw = 0
        self.delay_sum = 0.0
        self.mix_sum = 0  # neighbours' gradients in the steps taken

    # -- from the update's thread ------------------------------------------------

    def reduce(self, params: list[torch.Tensor] | None,
               scalars: dict[str, float]) -> dict[str, float]:
        """`params=None` opens an update (nothing to wait for); else push this step's
        gradient and replace it by the mean with what has arrived. Never blocks."""
        if params is None:
            self.update += 1
            return scalars
        flat = flat_grad(params).numpy()
        self.size = flat.size
        self.steps += 1
        payload = self.encoder.encode(flat)
        self.bytes_raw += flat.nbytes
        push = wire.GossipGrads(round=self.update, scalars={
            "reward": float(self.node.reward()), "sent": time.monotonic()}, arrays=payload)
        asyncio.run_coroutine_threadsafe(self._push(push, self.steps), self.loop)
        mean, used = self._mean(flat)
        if used:
            set_flat_grad(params, torch.from_numpy(mean))
        return scalars

    def _mean(self, flat: np.ndarray) -> tuple[np.ndarray, int]:
        with self.lock:
            came = list(self.inbox)
            self.inbox.clear()
        total = flat.astype(np.float64)
        weight = 1.0
        used = 0
        now = time.monotonic()
        for a in came:
            # how many of our updates passed since it came: the sender's own update
            # number says nothing of that, as peers update at their own pace
            gap = self.update - a.update
            if gap > self.G.grad_staleness:
                self.stats["grad_stale_dropped"] += 1
                continue
            w = 1.0 / (1.0 + max(0, gap))
            total += w * a.grad
            weight += w
            used += 1
            self.delay_sum += now - a.at
        self.stats["grad_used"] += used
        self.mix_sum += used
        return (total / weight).astype(np.float32), used

    # -- on the event loop ---------------------------------------------------------

    async def _push(self, msg: wire.GossipGrads, step: int) -> None:
        sent, dropped, nbytes = push(self.node, msg, self.choose(step))
        self.stats["grad_pushes"] += sent
        self.stats["grad_push_dropped"] += dropped
        self.bytes_sent += nbytes

    def receive(self, src: str, msg: wire.GossipGrads) -> None:
        """A neighbour's push: decoded and queued, or refused (counted)."""
        try:
            if not self.size:
                raise ValueError("no gradient of our own yet to compare with")
            grad = grad_codec.decode(dict(msg.arrays), self.size)
            reward = float(msg.scalars.get("reward", 0.0))
            if not np.isfinite(reward):
                raise ValueError("reward is not finite")
        except (ValueError, TypeError, KeyError) as e:
            if self.size:
                self.stats["grad_pushes_refused"] += 1
                self.node.wire_stats.reject(src, wire.WireError(f"gradient push refused: {e}"))
            return
        a = Arrived(src, self.update, reward, grad, time.monotonic(),
                    float(msg.scalars.get("sent", 0.0)))
        self.stats["grad_received"] += 1
        with self.lock:
            self.inbox.append(a)
            kept = keep_best(self.inbox, self.G.max_queue_size, self.G.priority_fn)
            if kept is not None:
                self.inbox = kept
                self.stats["grad_queue_overflow"] += 1

    def metrics(self) -> dict[str, float]:
        out: dict[str, float] = {f"gossip/{k}": v for k, v in self.stats.items()}
        steps = max(1, self.steps)
        out["gossip/grad_bytes_sent"] = self.bytes_sent
        out["gossip/grad_bytes_per_step"] = round(self.bytes_sent / steps, 1)
        out["gossip/grad_compression_ratio"] = round(
            self.bytes_raw * self.G.neighbor_count / max(1, self.bytes_sent), 2) \
            if self.bytes_sent else 0.0
        out["gossip/grad_mixed_per_step"] = round(self.mix_sum / steps, 3)
        if self.stats["grad_used"]:
            out["gossip/grad_queue_delay_ms"] = round(
                1000 * self.delay_sum / self.stats["grad_used"], 3)
        return out
