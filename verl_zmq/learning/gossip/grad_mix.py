"""Gradient averaging for gossip peers (`gossip.mixing = "gradients"`): DD-PPO's
all-reduce over the gossip sockets, every minibatch, with no centre.

The update runs in a worker thread; after each backward pass it hands the
minibatch's gradients to `reduce`, which blocks that thread while the event
loop runs one round: push our flat gradient (with a round number) to the
round's out-neighbours, wait for the in-neighbours' pushes of the same round,
and write back the mean. The round that opens an update carries no gradient,
only scalars (the peers' progress, so schedules run on the group's), and
aligns round numbers: a peer that restarted, or fell behind, jumps to the
newest update it has heard of.

Within a group of at most `round_mix.COMPLETE_MAX` peers every peer averages
the same gradients in the same order (sorted member ids, float64 sums), so
peers that start from the same parameters hold bit-identical parameters after
every update: K peers with B/K steps each are one learner with batch B. Larger
groups average along the exponential graph, and exact parameter rounds
(`gossip.sync_interval`) pull them together.

A neighbour whose push has not come within `gossip.round_deadline_s` is left
out of the round (the mean is over those that came) and marked behind: no
round waits for it again until it pushes a round as new as ours. A peer that
joins once rounds are under way (a restart) starts behind, so it never stalls
the others; the first round of all waits longer (FIRST_ROUND_DEADLINES), since
peers reach their first update at different times, for every peer the registry
still lists. Pushes that are not finite or do not have our gradient's length
are refused, never mixed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import math
import time

import numpy as np
import torch
import zmq

from ... import wire
from ...comm.messaging import send
from ...policy.nets import flat_grad, set_flat_grad
from .mix_node import MixNode
from .round_mix import round_graph

STRIDE = 1 << 20  # round numbers: update * STRIDE + minibatch step within it
FIRST_ROUND_DEADLINES = 10  # the first round waits this many deadlines at most


class GradMixer:
    """Rounds of gradient averaging for one peer; its `GossipNode` owns it."""

    def __init__(self, node: MixNode, deadline_s: float, peers: int = 0):
        self.node = node
        self.deadline_s = deadline_s
        self.peers = peers  # the job's peers (0: not said), for `_note_short`
        self.short = False  # the last round had fewer peers than the job
        self.loop = asyncio.get_running_loop()
        self.update = -1  # the update the current round belongs to
        self.step = 0
        self.inbox: dict[str, dict[int, wire.GossipGrads]] = {}
        self.behind: set[str] = set()
        self.seen: set[str] = set()  # neighbours a round of ours has counted on
        self.arrived = asyncio.Event()
        self.stats = dict.fromkeys(("grad_rounds", "grad_partial_rounds",
                                    "grad_pushes_refused", "grad_pushes_stale"), 0)
        self.wait_s = 0.0

    @property
    def key(self) -> int:
        return self.update * STRIDE + self.step

    # -- from the update's thread ------------------------------------------------

    def reduce(self, params: list[torch.Tensor] | None,
               scalars: dict[str, float]) -> dict[str, float]:
        """One round, called from the update's worker thread: `params=None` opens an
        update; else each parameter's `.grad` becomes the group's mean. Returns the
        scalars averaged over the same peers."""
        flat = np.zeros(0, np.float32) if params is None else flat_grad(params).numpy()
        fut = asyncio.run_coroutine_threadsafe(
            self.round(flat, scalars, opens=params is None), self.loop)
        try:  # bounded: a stopping loop never runs the round, and the update goes on alone
            mean, out = fut.result(timeout=2 * self.deadline_s + 5.0)
        except (concurrent.futures.TimeoutError, concurrent.futures.CancelledError,
                RuntimeError) as e:
            fut.cancel()
            # said, not silent: this update's gradient was this peer's alone
            self.node.log.warning("gradient_round_abandoned", update=self.update,
                                  reason=type(e).__name__)
            return scalars
        if params is not None:
            set_flat_grad(params, torch.from_numpy(mean))
        return out

    # -- on the event loop ---------------------------------------------------------

    def receive(self, src: str, msg: wire.GossipGrads) -> None:
        """A neighbour's push: kept by round number when its contents are sane."""
        grad = msg.arrays.get("grad")
        why = ""
        if grad is None or grad.dtype != np.float32 or grad.ndim != 1:
            why = "no float32 vector 'grad'"
        elif not np.isfinite(grad).all():
            why = "gradient is not finite"
        elif not all(math.isfinite(v) for v in msg.scalars.values()):
            why = "scalars are not finite"
        if why:
            self.stats["grad_pushes_refused"] += 1
            self.node.wire_stats.reject(src, wire.WireError(f"gradient push refused: {why}"))
            return
        if msg.round >= self.key:
            self.behind.discard(src)  # it keeps up again
        box = self.inbox.setdefault(src, {})
        box[msg.round] = msg
        while len(box) > 64:  # a peer far ahead of a stalled one: keep its newest
            del box[min(box)]
        self.arrived.set()

    def _next_update(self) -> int:
        """Ours plus one, or the newest update a neighbour is in: the one it opened,
        or the one after it when it is past the opening (it went on without us)."""
        best = self.update + 1
        for box in self.inbox.values():
            if box:
                u, step = divmod(max(box), STRIDE)
                best = max(best, u if step == 0 else u + 1)
        return best

    def _waits_for(self, pid: str, key: int) -> bool:
        box = self.inbox.get(pid, {})
        if pid not in self.node.peers or pid in self.behind or key in box:
            return False
        if any(k > key for k in box):
            return False  # it went on without us
        # in this update or finishing the one before: it is coming. Further behind (a
        # restart): this round goes on without it, and it jumps to ours when it opens
        return not box or max(box) // STRIDE >= self.update - 1

    def _note_short(self, key: int) -> None:
        """Say a round among fewer peers than the job has (some not known yet): its
        mean is theirs alone, and the parameters differ until the next parameter
        round."""
        node, want = self.node, self.peers
        short = len(node.peers) + 1 < want
        if short and not self.short:  # once, when it starts: not once a round
            node.log.info("gradient_round_short", round=key, known=len(node.peers) + 1,
                          peers=want)
        self.short = short

    async def round(self, flat: np.ndarray, scalars: dict[str, float],
                    opens: bool) -> tuple[np.ndarray, dict[str, float]]:
        node = self.node
        if opens:
            nxt = self._next_update()
            if nxt != self.update + 1:
                node.log.info("gradient_rounds_jumped", update=nxt, was=self.update,
                              heard={p: divmod(max(b), STRIDE) for p, b in self.inbox.items()
                                     if b})
            self.update, self.step = nxt, 0
        else:
            self.step += 1
        key = self.key
        send_to, hear_from = round_graph(node.id, node.peers, key)
        first = self.stats["grad_rounds"] == 0
        self._note_short(key)
        for pid in hear_from:
            if pid not in self.seen:  # a newcomer: waited for once it keeps up
                self.seen.add(pid)
                if not first and not any(k >= key for k in self.inbox.get(pid, {})):
                    self.behind.add(pid)
        deadline = self.deadline_s * (FIRST_ROUND_DEADLINES if first else 1)
        push = wire.GossipGrads(round=key, scalars=scalars, arrays={"grad": flat})
        for pid in send_to:
            with contextlib.suppress(zmq.ZMQError, KeyError):
                await send(node.dealer(pid), push, node.id)
        t0 = time.monotonic()
        while True:
            waiting = [p for p in hear_from if self._waits_for(p, key)]
            left = deadline - (time.monotonic() - t0)
            if not waiting or left <= 0:
                break
            self.arrived.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await self.arrived.wait()
        self.wait_s += time.monotonic() - t0
        self.behind.update(waiting)
        got: dict[str, wire.GossipGrads] = {}
        for pid in hear_from:
            box = self.inbox.get(pid, {})
            for k in [k for k in box if k < key]:
                del box[k]
                self.stats["grad_pushes_stale"] += 1
            msg = box.pop(key, None)
            if msg is not None and len(msg.arrays["grad"]) == len(flat):
                got[pid] = msg
            elif msg is not None:
                self.stats["grad_pushes_refused"] += 1
        self.stats["grad_rounds"] += 1
        if waiting:
            self.stats["grad_partial_rounds"] += 1
            node.log.info("gradient_round_partial", round=key, missing=sorted(waiting),
                          wait_s=round(time.monotonic() - t0, 4))
        return self._mean(flat, scalars, got)

    def _mean(self, flat: np.ndarray, scalars: dict[str, float],
              got: dict[str, wire.GossipGrads]) -> tuple[np.ndarray, dict[str, float]]:
        """The same sum in the same order on every peer: sorted ids, float64."""
        mine = wire.GossipGrads(round=self.key, scalars=scalars, arrays={"grad": flat})
        every = [m for _, m in sorted({**got, self.node.id: mine}.items())]
        n = len(every)
        total = np.zeros(len(flat), np.float64)
        for m in every:
            total += m.arrays["grad"]
        out = {k: sum(float(m.scalars.get(k, v)) for m in every) / n
               for k, v in scalars.items()}
        return (total / n).astype(np.float32), out

    def metrics(self) -> dict[str, float]:
        return {**{f"gossip/{k}": v for k, v in self.stats.items()},
                "gossip/grad_wait_s": round(self.wait_s, 3),
                "gossip/grad_behind": len(self.behind)}
