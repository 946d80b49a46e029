"""Exact mixing (`gossip.mixing = "exact"`), in one process over inproc sockets:
peers that push for a round all end with the same average; a silent peer is
left out after the deadline and the weights renormalised; non-finite or
mismatched pushes are refused; the graph is complete for small groups and a
one-peer exponential graph beyond; a peer far behind takes the others' round."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import numpy as np
import pytest
import zmq
import zmq.asyncio

from tests.gossip_fakes import peer_group
from verl_zmq import wire
from verl_zmq.comm.messaging import WireStats, recv
from verl_zmq.comm.transport import Transport
from verl_zmq.learning.gossip.round_mix import RoundMixer
from verl_zmq.log import get_logger

pytestmark = pytest.mark.timeout(60)


class FakePeer:
    """What a RoundMixer needs of its GossipNode: arrays, sockets, a trainer."""

    def __init__(self, t: Transport, pid: str, value: float, deadline_s: float = 2.0):
        self.t, self.id = t, pid
        self.arrays = {"w": np.full((2, 3), value, np.float32), "b": np.full(3, value, np.float32)}
        self.sock, self.endpoint = t.bind(zmq.ROUTER, f"g-{pid}", hwm=100)
        self.peers: dict[str, FakePeer] = {}
        self.dealers: dict[str, zmq.asyncio.Socket] = {}
        self.log = get_logger(role="test")
        self.wire_stats = WireStats(self.log, 60.0)
        self.published = 0
        self.trainer = SimpleNamespace(state=SimpleNamespace(version=0),
                                       load_arrays=self._load)
        self.mixer = RoundMixer(self, deadline_s)

    def _load(self, arrays):
        self.arrays = {k: np.asarray(v) for k, v in arrays.items()}
        self.trainer.state.version += 1

    def own_arrays(self):
        return dict(self.arrays)

    def fingerprint(self):
        return ""

    def reward(self):
        return 0.0

    def dealer(self, pid):
        if pid not in self.dealers:
            self.dealers[pid] = self.t.connect(zmq.DEALER, self.peers[pid].endpoint)
        return self.dealers[pid]

    async def publish(self):
        self.published += 1

    async def serve(self):
        while True:
            _, msg = await recv(self.sock, self.wire_stats, n_prefix=1,
                                expect=(wire.GossipParams,))
            if msg is not None and not msg.request:
                self.mixer.receive(msg.src, msg)


def group(values, deadline_s=2.0):
    return peer_group(lambda t, pid, i: FakePeer(t, pid, values[i], deadline_s), len(values))


async def test_one_round_gives_every_peer_the_same_average():
    async with group([0.0, 1.0, 2.0, 5.0]) as peers:
        await asyncio.gather(*(p.mixer.run_round() for p in peers))
        for p in peers:
            np.testing.assert_allclose(p.arrays["w"], 2.0)
            np.testing.assert_allclose(p.arrays["b"], 2.0)
            assert p.mixer.round == 1 and p.published == 1
            assert p.mixer.stats["partial_rounds"] == 0


async def test_a_silent_peer_is_left_out_after_the_deadline():
    async with group([0.0, 3.0, 100.0], deadline_s=0.5) as peers:
        await asyncio.gather(*(p.mixer.run_round() for p in peers[:2]))  # peer-2 never pushes
        for p in peers[:2]:
            np.testing.assert_allclose(p.arrays["w"], 1.5)  # renormalised over two
            assert p.mixer.stats["partial_rounds"] == 1


async def test_bad_pushes_are_refused_and_never_mixed():
    async with group([1.0, 1.0], deadline_s=0.5) as (a, b):
        b.arrays["w"] = np.full((2, 3), np.nan, np.float32)
        await asyncio.gather(a.mixer.run_round(), b.mixer.run_round())
        assert a.mixer.stats["pushes_refused"] == 1
        np.testing.assert_allclose(a.arrays["w"], 1.0)  # nothing half-mixed
        assert np.isfinite(a.arrays["w"]).all()


async def test_peers_at_different_rounds_mix_every_push_without_waiting():
    async with group([0.0, 2.0]) as (a, b):
        b.mixer.round = 40  # a restarted peer meets one that has mixed for a while
        for _ in range(3):
            await asyncio.gather(a.mixer.run_round(), b.mixer.run_round())
        for p in (a, b):
            assert p.mixer.stats["partial_rounds"] == 0 and p.mixer.wait_s < 1.0
            np.testing.assert_allclose(p.arrays["w"], 1.0)
        await b.mixer.run_round()  # b pushes once more; a, later, takes b's round
        await a.mixer.run_round()
        assert a.mixer.round == b.mixer.round


def test_the_graph_is_complete_when_small_and_exponential_beyond():
    small = SimpleNamespace(id="peer-0", peers={f"peer-{i}": 0 for i in range(1, 4)})
    out, into = RoundMixer(small, 1.0).graph(1)
    assert out == into == ["peer-1", "peer-2", "peer-3"]
    ids = [f"peer-{i:02d}" for i in range(16)]
    sends = {}
    for r in range(1, 5):
        for me in ids:
            node = SimpleNamespace(id=me, peers=dict.fromkeys(i for i in ids if i != me))
            out, into = RoundMixer(node, 1.0).graph(r)
            assert len(out) == len(into) == 1
            sends.setdefault(r, []).append(out[0])
        assert sorted(sends[r]) == ids  # every peer hears from exactly one: doubly stochastic
    # log2(16) = 4 pairwise rounds average 16 values exactly
    x = {i: float(n) for n, i in enumerate(ids)}
    for r in range(1, 5):
        new = {}
        for me in ids:
            node = SimpleNamespace(id=me, peers=dict.fromkeys(i for i in ids if i != me))
            _, into = RoundMixer(node, 1.0).graph(r)
            new[me] = (x[me] + x[into[0]]) / 2
        x = new
    assert max(x.values()) - min(x.values()) < 1e-12
