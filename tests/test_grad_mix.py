"""Gradient rounds (`gossip.mixing = "gradients"`), in one process over inproc
sockets: four PPO learners, each updating on its own batch in a worker thread
and averaging every minibatch's gradient with the others, hold bit-identical
parameters after every update, and their approximate KL and progress are the
group's; a silent peer costs one deadline, then no round waits for it, while the first
round waits for a peer that starts late; a non-finite push is refused; a peer
far behind never stalls the others and jumps to their update."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import zmq
import zmq.asyncio

from tests.gossip_fakes import peer_group
from verl_zmq import wire
from verl_zmq.algos import make_algorithm
from verl_zmq.algos.base import Progress
from verl_zmq.comm.messaging import WireStats, recv
from verl_zmq.comm.transport import Transport
from verl_zmq.config import load_job
from verl_zmq.envs.make import env_spec
from verl_zmq.learning.gossip.grad_mix import STRIDE, GradMixer
from verl_zmq.log import get_logger

from .conftest import CONFIGS

pytestmark = pytest.mark.timeout(120)


class FakePeer:
    """What a GradMixer needs of its GossipNode: an id, neighbours, sockets."""

    def __init__(self, t: Transport, pid: str, deadline_s: float):
        self.t, self.id = t, pid
        self.sock, self.endpoint = t.bind(zmq.ROUTER, f"g-{pid}", hwm=1000)
        self.peers: dict[str, FakePeer] = {}
        self.dealers: dict[str, zmq.asyncio.Socket] = {}
        self.log = get_logger(role="test")
        self.wire_stats = WireStats(self.log, 60.0)
        self.grads = GradMixer(self, deadline_s)

    def dealer(self, pid):
        if pid not in self.dealers:
            self.dealers[pid] = self.t.connect(zmq.DEALER, self.peers[pid].endpoint, hwm=1000)
        return self.dealers[pid]

    async def serve(self):
        while True:
            _, msg = await recv(self.sock, self.wire_stats, n_prefix=1,
                                expect=(wire.GossipGrads,))
            if msg is not None:
                self.grads.receive(msg.src, msg)


def group(n: int, deadline_s: float = 5.0):
    return peer_group(lambda t, pid, _: FakePeer(t, pid, deadline_s), n)


def ppo_batch(rng: np.random.Generator, T: int = 8, N: int = 8) -> dict[str, np.ndarray]:
    f = np.float32
    return {"obs": rng.standard_normal((T, N, 4)).astype(f),
            "action": rng.integers(0, 2, (T, N)), "reward": np.ones((T, N), f),
            "terminated": rng.random((T, N)) < 0.05, "truncated": np.zeros((T, N), bool),
            "valid": np.ones((T, N), bool),
            "logp": np.full((T, N), np.log(0.5), f), "value": np.zeros((T, N), f),
            "bootstrap_obs": rng.standard_normal((N, 4)).astype(f),
            "bootstrap_value": np.zeros(N, f)}


def fingerprint(algo) -> bytes:
    return b"".join(p.detach().numpy().tobytes() for p in algo.net.parameters())


async def test_peers_reducing_gradients_hold_identical_parameters():
    torch.set_num_threads(1)
    job = load_job(CONFIGS / "cartpole_dapo.toml", [
        "algorithm.params.batch_size=256", "algorithm.params.minibatch_size=32",
        "algorithm.params.n_epochs=3", "algorithm.params.target_kl=0.02"])
    spec = env_spec(job.environment)
    async with group(4) as peers:
        algos = []
        for p in peers:
            algo = make_algorithm(job, spec, reduce_grads=p.grads.reduce)
            algo.init_policy()  # every peer starts from the job's version-0 weights
            algos.append(algo)
        assert len({fingerprint(a) for a in algos}) == 1
        rngs = [np.random.default_rng(i) for i in range(4)]  # each its own experience
        for u in range(5):
            # progress differs per peer; the schedule runs on the group's mean
            learned = await asyncio.gather(*(asyncio.to_thread(
                a.learn, ppo_batch(rng), Progress(fraction=0.1 * i))
                for i, (a, rng) in enumerate(zip(algos, rngs, strict=True))))
            assert len({fingerprint(a) for a in algos}) == 1, f"peers parted at update {u}"
            lrs = {m.metrics["charts/learning_rate"] for m in learned}
            kls = {m.metrics["losses/approx_kl"] for m in learned}
            assert len(lrs) == 1 and len(kls) == 1
            np.testing.assert_allclose(lrs.pop(), job.algorithm.params.learning_rate
                                       * (1 - 0.15), rtol=1e-6)
        alone = make_algorithm(job, spec)
        alone.init_policy()
        alone.learn(ppo_batch(rngs[0]))
        assert fingerprint(alone) != fingerprint(algos[0])  # the rounds changed something
        for p in peers:
            assert p.grads.stats["grad_partial_rounds"] == 0
            assert p.grads.stats["grad_rounds"] > 5 * 8  # an opening round + every minibatch


async def rounds(p, value, n=4):
    """One update: the opening round, then `n` gradient rounds of all-`value`s."""
    await p.grads.round(np.zeros(0, np.float32), {}, opens=True)
    out = []
    for _ in range(n):
        mean, _ = await p.grads.round(np.full(10, value, np.float32), {}, opens=False)
        out.append(mean)
    return out


async def test_a_silent_peer_costs_one_deadline_then_is_not_waited_for():
    async with group(3, deadline_s=0.5) as (a, b, c):
        await asyncio.gather(rounds(a, 1.0), rounds(b, 3.0), rounds(c, 5.0))
        got_a, got_b = await asyncio.gather(rounds(a, 1.0), rounds(b, 3.0))  # c is silent
        for mean in got_a + got_b:
            np.testing.assert_array_equal(mean, np.full(10, 2.0, np.float32))
        assert a.grads.stats["grad_partial_rounds"] == 1 and a.grads.behind == {"peer-2"}
        # one deadline waited (a partial round each), not one per round
        assert b.grads.stats["grad_partial_rounds"] == 1 and b.grads.behind == {"peer-2"}


async def test_the_first_round_waits_for_a_slow_starter():
    async with group(2, deadline_s=0.3) as (a, b):
        async def late(p):
            await asyncio.sleep(1.0)  # more than a deadline: importing, a first fragment
            return await rounds(p, 3.0)

        got_a, _ = await asyncio.gather(rounds(a, 1.0), late(b))
        np.testing.assert_array_equal(got_a[-1], np.full(10, 2.0, np.float32))
        assert a.grads.stats["grad_partial_rounds"] == 0


async def test_non_finite_pushes_are_refused():
    async with group(2, deadline_s=0.3) as (a, b):
        bad = np.full(4, np.nan, np.float32)
        good = np.ones(4, np.float32)
        await asyncio.gather(a.grads.round(good, {}, opens=True),
                             b.grads.round(bad, {}, opens=True))
        assert a.grads.stats["grad_pushes_refused"] == 1
        mean, _ = await a.grads.round(good, {}, opens=False)
        assert np.isfinite(mean).all()


async def test_a_peer_far_behind_jumps_to_the_newest_update():
    async with group(2, deadline_s=1.0) as (a, b):
        a.grads.update = 40  # a has trained for a while; b restarted
        a.grads.stats["grad_rounds"] = 1000
        a.grads.seen.add(b.id)
        g = np.ones(3, np.float32)

        async def update(p):
            await p.grads.round(np.zeros(0, np.float32), {"x": 1.0}, opens=True)
            return await p.grads.round(g, {}, opens=False)

        for _ in range(3):  # b's first update goes alone, then it catches up
            await asyncio.gather(update(a), update(b))
            await asyncio.sleep(0.05)  # pushes in flight land
        before = a.grads.stats["grad_partial_rounds"]
        await asyncio.gather(update(a), update(b))
        assert a.grads.key == b.grads.key and a.grads.key // STRIDE >= 43
        assert a.grads.stats["grad_partial_rounds"] == before == 0


def test_the_group_mean_is_the_same_sum_on_every_peer():
    node = SimpleNamespace(id="peer-1", peers={})
    mixer = GradMixer.__new__(GradMixer)
    mixer.node, mixer.update, mixer.step = node, 0, 1
    rng = np.random.default_rng(0)
    g = {f"peer-{i}": rng.standard_normal(100).astype(np.float32) for i in range(4)}
    msgs = {k: wire.GossipGrads(round=1, scalars={"k": float(i)}, arrays={"grad": v})
            for i, (k, v) in enumerate(g.items())}
    means = []
    for me in g:
        node.id = me
        got = {k: m for k, m in msgs.items() if k != me}
        mean, sc = mixer._mean(g[me], {"k": msgs[me].scalars["k"]}, got)
        means.append(mean.tobytes())
        assert sc["k"] == 1.5
    assert len(set(means)) == 1
