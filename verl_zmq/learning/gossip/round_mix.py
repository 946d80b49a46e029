"""Exact mixing for gossip peers (`gossip.mixing = "exact"`): after every
`gossip.sync_interval` local updates each peer pushes its parameters, tagged
with a round number, to its out-neighbours and averages them with what its
in-neighbours pushed for that round, with equal weights.

The graph is complete for small groups (at most COMPLETE_MAX peers: every peer
averages over the same set, so all hold the same parameters after a round) and
a one-peer exponential graph beyond (round r: peer i sends to i + 2^k and hears
from i - 2^k, k = r mod ceil(log2 N); pairwise averaging, doubly stochastic,
exact consensus in log2 N rounds when N is a power of two). A round waits for a
fresh push (one not mixed in yet) from each in-neighbour, so peers whose round
numbers differ (one restarted, or a push that crossed a round's end) still mix
every push once and never wait on each other; a peer behind takes the newest
round it heard. A neighbour that has not pushed within
`gossip.round_deadline_s` is left out of that round and the weights
renormalised; one that the registry drops is no longer waited for. Parameters
that are not finite or do not match ours are refused, never mixed.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Iterable

import numpy as np
import zmq

from ... import wire
from ...comm.messaging import send
from . import core as gossip
from .mix_node import MixNode

COMPLETE_MAX = 8  # peers: up to this many, everyone averages with everyone


def round_graph(me: str, peers: Iterable[str], r: int) -> tuple[list[str], list[str]]:
    """(out-neighbours, in-neighbours) of peer `me` in round `r`: everyone when the
    group has at most COMPLETE_MAX peers, else one peer each way along the
    exponential graph (2^(r mod log2 N) places ahead and behind)."""
    ids = sorted([*peers, me])
    n = len(ids)
    if n <= COMPLETE_MAX:
        others = [i for i in ids if i != me]
        return others, others
    k = 2 ** (r % math.ceil(math.log2(n)))
    pos = ids.index(me)
    return [ids[(pos + k) % n]], [ids[(pos - k) % n]]


class RoundMixer:
    """Rounds of exact averaging for one peer; its `GossipNode` owns it."""

    def __init__(self, node: MixNode, deadline_s: float):
        self.node = node
        self.deadline_s = deadline_s
        self.round = 0
        # the newest push from each peer, until it is mixed in
        self.inbox: dict[str, tuple[int, dict[str, np.ndarray]]] = {}
        self.arrived = asyncio.Event()
        self.stats = dict.fromkeys(("rounds", "partial_rounds", "pushes_refused"), 0)
        self.wait_s = 0.0
        self._like: dict[str, np.ndarray] | None = None  # names and shapes pushes must have

    def graph(self, r: int) -> tuple[list[str], list[str]]:
        """(out-neighbours, in-neighbours) of this peer in round `r`."""
        return round_graph(self.node.id, self.node.peers, r)

    def receive(self, src: str, msg: wire.GossipParams) -> None:
        """A neighbour's push: kept when it fits our parameters and is its newest."""
        arrays = dict(msg.arrays)
        if self._like is None:  # names and shapes never change: read ours once
            self._like = self.node.own_arrays()
        why = gossip.check_like(arrays, self._like)
        if why:
            self.stats["pushes_refused"] += 1
            self.node.wire_stats.reject(src, wire.WireError(f"round params refused: {why}"))
            return
        self.inbox[src] = (msg.round, {k: np.array(v) for k, v in arrays.items()})
        self.arrived.set()

    def _ready(self, hear_from: list[str]) -> bool:
        return all(p in self.inbox for p in hear_from if p in self.node.peers)

    async def run_round(self) -> None:
        """Push ours, wait for the round (at most the deadline), average, publish."""
        node = self.node
        r = max([self.round + 1] + [g[0] for g in self.inbox.values()])
        send_to, hear_from = self.graph(r)
        own = node.own_arrays()
        push = wire.GossipParams(round=r, fingerprint=node.fingerprint(), reward=node.reward(),
                                 version=node.trainer.state.version, arrays=own)
        for pid in send_to:
            with contextlib.suppress(zmq.ZMQError, KeyError):
                await send(node.dealer(pid), push, node.id)
        t0 = time.monotonic()
        while not self._ready(hear_from) and time.monotonic() - t0 < self.deadline_s:
            self.arrived.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.deadline_s - (time.monotonic() - t0)):
                    await self.arrived.wait()
        self.wait_s += time.monotonic() - t0
        got = {p: self.inbox.pop(p) for p in hear_from if p in self.inbox}
        self.stats["rounds"] += 1
        if len(got) < len(hear_from):
            self.stats["partial_rounds"] += 1
        if got:
            # the same sum in the same order on every peer (sorted ids, float64): peers
            # that averaged one set hold bit-identical parameters
            every = [a for _, a in sorted({**{p: g[1] for p, g in got.items()},
                                           node.id: own}.items())]
            mean = {}
            for k, v in own.items():
                total = np.zeros(v.shape, np.float64)
                for a in every:
                    total += a[k]
                mean[k] = (total / len(every)).astype(v.dtype)
            node.trainer.load_arrays(mean)
        self.round = r
        node.log.info("gossip_round_mixed", round=r, sources=sorted(got),
                      missing=sorted(set(hear_from) - set(got)),
                      wait_s=round(time.monotonic() - t0, 4),
                      version=node.trainer.state.version)
        await node.publish()

    def metrics(self) -> dict[str, float]:
        return {**{f"gossip/{k}": v for k, v in self.stats.items()},
                "gossip/round_wait_s": round(self.wait_s, 3), "gossip/mix_round": self.round}
