"""The learner's feeds and the replay shard shell, in one process: real ZeroMQ
sockets over inproc, a fake shard ROUTER (or a real shard role) on the other
side, no subprocess and no sleep longer than a heartbeat. Credits, lag,
reconnection by incarnation, priorities and proportional requests."""

from __future__ import annotations

import asyncio
import contextlib

import numpy as np
import pytest
import zmq
import zmq.asyncio

from tests.conftest import CONFIGS
from verl_zmq import wire
from verl_zmq.algos.base import Learned
from verl_zmq.batch import Layout
from verl_zmq.comm.messaging import WireStats, recv, send
from verl_zmq.comm.transport import Transport
from verl_zmq.config import load_job
from verl_zmq.envs.make import EnvSpec
from verl_zmq.learning.fragment_feed import FragmentFeed
from verl_zmq.learning.links import ShardAddress
from verl_zmq.learning.sampled_feed import SampledFeed
from verl_zmq.learning.state import FeedConfig, LinkConfig, TrainState
from verl_zmq.log import get_logger
from verl_zmq.roles.base import RoleContext
from verl_zmq.roles.replay import ReplayRole
from verl_zmq.wire.samples import cartpole_fragment

pytestmark = pytest.mark.timeout(60)
SPEC = EnvSpec((4,), True, 2, ())
T, E = 16, 2  # one fragment: 32 env steps
LAYOUT = Layout(SPEC, T, ("logp", "value"))


class FakeShard:
    """A ROUTER that records what learners ask and answers from a script."""

    def __init__(self, t: Transport, name: str = "shard"):
        self.sock, self.endpoint = t.bind(zmq.ROUTER, name, hwm=1000)
        self.stats = WireStats(get_logger(role="test"), 60.0)
        self.credit: dict[bytes, int] = {}
        self.batch_size: dict[bytes, int] = {}
        self.requests: list[tuple[bytes, wire.SampleRequest]] = []
        self.priorities: list[wire.PriorityUpdate] = []
        self.max_credit = 0

    async def take(self, n: int = 1, timeout: float = 5.0) -> None:
        """Receive n messages from learners."""
        for _ in range(n):
            async with asyncio.timeout(timeout):
                prefix, msg = await recv(self.sock, self.stats, n_prefix=1)
            ident = prefix[0].bytes
            if isinstance(msg, wire.PriorityUpdate):
                self.priorities.append(msg)
                continue
            self.requests.append((ident, msg))
            self.credit[ident] = self.credit.get(ident, 0) + msg.credit
            self.max_credit = max(self.max_credit, self.credit[ident])
            if msg.batch_size:
                self.batch_size[ident] = msg.batch_size

    async def serve(self, ident: bytes, msg: wire.Batch) -> None:
        assert self.credit.get(ident, 0) > 0, "served without credit"
        self.credit[ident] -= 1
        await send(self.sock, msg, "shard", prefix=[ident])

    async def drain_requests(self, settle: float = 0.1) -> None:
        """Take whatever requests are waiting (briefly)."""
        with contextlib.suppress(TimeoutError):
            while True:
                await self.take(1, timeout=settle)


@contextlib.asynccontextmanager
async def sockets():
    zctx = zmq.asyncio.Context()
    t = Transport(zctx, inproc=True)
    try:
        yield t
    finally:
        t.close()
        zctx.term()


def links_args(t: Transport) -> LinkConfig:
    return LinkConfig(t, get_logger(role="test"), WireStats(get_logger(role="test"), 60.0),
                      "learner-0")


def fragment(version: int = 0, seed: int = 0, **change) -> wire.Batch:
    a = cartpole_fragment(T, E, seed)
    a.update(change)
    return wire.Batch(version=version, sampler=f"sampler-{seed}", arrays=a)


def fragment_feed(t, state, batch_size=64, prefetch=2, max_lag=2, **kw) -> FragmentFeed:
    cfg = FeedConfig(batch_size=batch_size, prefetch=prefetch, fragment_steps=T * E,
                     max_lag=max_lag, **kw)
    return FragmentFeed(links_args(t), state, LAYOUT, cfg)


async def test_fragment_feed_keeps_credits_within_its_window():
    async with sockets() as t:
        shard = FakeShard(t)
        state = TrainState()
        feed = fragment_feed(t, state)  # window: prefetch 2 + 2 fragments per batch
        await feed.reconcile({"replay-0": ShardAddress(shard.endpoint, 1)})
        await shard.take(1)
        ident, first = shard.requests[0]
        assert first.credit == 4 and first.batch_size == 64
        served = 0
        for update in range(6):
            while shard.credit[ident] > 0:  # the shard serves all it may
                await shard.serve(ident, fragment(version=state.version, seed=update))
                served += 1
            batch = await asyncio.wait_for(feed.next(), 5)
            assert batch["obs"].shape == (T, 2 * E, 4)  # two fragments side by side
            assert batch["bootstrap_value"].shape == (2 * E,)
            state.version += 1
            await feed.done(Learned())
            await shard.drain_requests()
            # credits at the shard + fragments pending here never exceed the window
            assert shard.credit[ident] + len(feed.pending) <= 4
        assert shard.max_credit <= 4
        await asyncio.sleep(0.05)  # the last fragments reach the feed
        assert feed.env_steps(0) == served * T * E
        feed.links.close_all()


async def test_fragment_feed_drops_lagging_fragments_once_and_returns_their_credit():
    async with sockets() as t:
        shard = FakeShard(t)
        state = TrainState(version=10)
        feed = fragment_feed(t, state, batch_size=32, prefetch=1, max_lag=2)
        await feed.reconcile({"replay-0": ShardAddress(shard.endpoint, 1)})
        await shard.take(1)
        ident = shard.requests[0][0]
        await shard.serve(ident, fragment(version=5))  # lag 5 > 2: dropped when taken
        await shard.serve(ident, fragment(version=9))  # lag 1: used
        batch = await asyncio.wait_for(feed.next(), 5)
        assert batch["obs"].shape == (T, E, 4)
        assert feed.dropped == 1 and list(feed.lags) == [5, 1]
        await shard.drain_requests()
        assert shard.credit[ident] == 2  # both credits came back
        assert feed.env_steps(0) == 2 * T * E  # a dropped fragment's steps still count
        feed.links.close_all()


async def test_a_restarted_shard_is_reconnected_with_a_fresh_window():
    async with sockets() as t:
        shard = FakeShard(t)
        state = TrainState()
        feed = fragment_feed(t, state)
        await feed.reconcile({"replay-0": ShardAddress(shard.endpoint, 1)})
        await feed.reconcile({"replay-0": ShardAddress(shard.endpoint, 1)})  # no change
        await shard.take(1)
        await shard.drain_requests()
        assert len(shard.requests) == 1
        old = feed.links.links["replay-0"]
        # same member, same endpoint, new incarnation: it knows none of our credits
        await feed.reconcile({"replay-0": ShardAddress(shard.endpoint, 2)})
        await shard.take(1)
        new_ident, req = shard.requests[-1]
        assert new_ident != shard.requests[0][0] and req.credit == 4
        assert old.sock.closed and not feed.links.is_live(old)
        assert feed.links.links["replay-0"].address.incarnation == 2
        await feed.reconcile({})  # gone from the membership: closed
        assert len(feed.links) == 0
        await asyncio.sleep(0)
        assert old.reader.cancelled() or old.reader.done()


async def test_a_malformed_fragment_is_counted_and_its_credit_returned():
    async with sockets() as t:
        shard = FakeShard(t)
        state = TrainState()
        feed = fragment_feed(t, state, batch_size=32, prefetch=1)
        await feed.reconcile({"replay-0": ShardAddress(shard.endpoint, 1)})
        await shard.take(1)
        ident = shard.requests[0][0]
        await shard.serve(ident, fragment(value=np.zeros((T, E + 1), np.float32)))
        await shard.serve(ident, fragment(seed=1))
        batch = await asyncio.wait_for(feed.next(), 5)
        assert batch["obs"].shape == (T, E, 4)
        assert feed.rejected == 1 and feed.links.stats.errors == 1
        await shard.drain_requests()
        assert shard.credit[ident] == 2
        feed.links.close_all()


async def test_a_fragment_filter_drops_and_draws_more():
    async with sockets() as t:
        shard = FakeShard(t)
        state = TrainState()
        def keep(a):
            return (a, T * E) if float(a["reward"][0, 0]) > 0 else None

        cfg = FeedConfig(batch_size=32, prefetch=4, fragment_steps=T * E, max_lag=4,
                         max_fills=3, fill_timeout_s=1.0)
        feed = FragmentFeed(links_args(t), state, LAYOUT, cfg, keep=keep)
        await feed.reconcile({"replay-0": ShardAddress(shard.endpoint, 1)})
        await shard.take(1)
        ident = shard.requests[0][0]
        await shard.serve(ident, fragment(reward=np.zeros((T, E), np.float32)))
        await shard.serve(ident, fragment(seed=2))
        batch = await asyncio.wait_for(feed.next(), 5)
        assert batch is not None and batch["reward"].shape == (T, E)
        assert float(batch["reward"][0, 0]) == 1.0 and feed.filtered == 1
        feed.links.close_all()


def sampled_batch(n: int, env_steps: int, size: int, first: int = 0) -> wire.Batch:
    rng = np.random.default_rng(first)
    return wire.Batch(arrays={
        "obs": rng.standard_normal((n, 4), dtype=np.float32),
        "next_obs": rng.standard_normal((n, 4), dtype=np.float32),
        "action": rng.integers(0, 2, n), "reward": np.ones(n, np.float32),
        "discount": np.full(n, 0.99, np.float32), "weight": np.ones(n, np.float32),
        "index": np.arange(first, first + n), "generation": np.ones(n, np.int64),
        "env_steps": np.array([env_steps]), "size": np.array([size])})


def sampled_feed(t, state, prefetch=1) -> SampledFeed:
    cfg = FeedConfig(batch_size=8, prefetch=prefetch)
    return SampledFeed(links_args(t), SPEC, cfg, np.random.default_rng(0))


async def test_priorities_go_back_to_the_shard_the_batch_came_from():
    async with sockets() as t:
        a, b = FakeShard(t, "a"), FakeShard(t, "b")
        state = TrainState()
        feed = sampled_feed(t, state)
        await feed.reconcile({"replay-0": ShardAddress(a.endpoint, 1),
                              "replay-1": ShardAddress(b.endpoint, 1)})
        await a.take(1)
        await b.take(1)
        assert a.requests[0][1].batch_size == 8
        await b.serve(b.requests[0][0], sampled_batch(8, env_steps=300, size=100, first=40))
        got = await asyncio.wait_for(feed.next(), 5)
        assert got["index"][0] == 40
        await feed.done(Learned(priorities=np.full(8, 2.5)))
        await b.take(1)
        assert len(b.priorities) == 1 and not a.priorities
        up = b.priorities[0].arrays
        assert up["index"].tolist() == list(range(40, 48)) and up["priority"][0] == 2.5
        # b had no credit left: the next request goes to it first
        await b.drain_requests()
        assert b.credit[b.requests[0][0]] == 1
        feed.links.close_all()


async def test_sampled_requests_follow_shard_sizes_and_env_steps_never_go_back():
    async with sockets() as t:
        a, b = FakeShard(t, "a"), FakeShard(t, "b")
        state = TrainState()
        feed = sampled_feed(t, state)
        await feed.reconcile({"replay-0": ShardAddress(a.endpoint, 1),
                              "replay-1": ShardAddress(b.endpoint, 1)})
        await a.take(1)
        await b.take(1)
        ia, ib = a.requests[0][0], b.requests[0][0]
        await a.serve(ia, sampled_batch(8, env_steps=1000, size=900))
        assert await asyncio.wait_for(feed.next(), 5) is not None
        await feed.done(Learned())  # a has no credit now: it gets the request
        await b.serve(ib, sampled_batch(8, env_steps=100, size=100))
        assert await asyncio.wait_for(feed.next(), 5) is not None
        assert (steps := feed.env_steps(0)) == 1100
        await feed.done(Learned())
        # both hold credit: requests now go 9:1 to the bigger shard
        for _ in range(40):
            await feed._request()
        await a.drain_requests()
        await b.drain_requests()
        assert a.credit[ia] > 3 * b.credit[ib]
        # a restarted shard (same member) reporting less does not take steps back
        await feed.reconcile({"replay-0": ShardAddress(a.endpoint, 2),
                              "replay-1": ShardAddress(b.endpoint, 1)})
        await a.take(1)
        await a.serve(a.requests[-1][0], sampled_batch(8, env_steps=200, size=50))
        assert await asyncio.wait_for(feed.next(), 5) is not None
        assert feed.env_steps(steps) == 1100
        feed.links.close_all()


async def test_a_bad_sampled_batch_is_refused_and_another_requested():
    async with sockets() as t:
        a = FakeShard(t)
        state = TrainState()
        feed = sampled_feed(t, state)
        await feed.reconcile({"replay-0": ShardAddress(a.endpoint, 1)})
        await a.take(1)
        bad = sampled_batch(8, 10, 10)
        bad.arrays["reward"] = np.full(8, np.nan, np.float32)
        await a.serve(a.requests[0][0], bad)
        assert await asyncio.wait_for(feed.next(), 5) is None
        assert feed.rejected == 1
        await a.take(1)
        assert a.credit[a.requests[0][0]] == 1
        feed.links.close_all()


# -- the shard shell, as a real role in this process ------------------------------


@contextlib.asynccontextmanager
async def shard_role(tmp_path, job_file: str, overrides: list[str]):
    job = load_job(CONFIGS / job_file, overrides)
    async with sockets() as t:
        ctx = RoleContext(job=job, role="replay", member_id="replay-0", group="main", index=0,
                          incarnation=1, registry="inproc://none", run_dir=tmp_path,
                          host="127.0.0.1", transport=t, log=get_logger(role="replay"))
        role = ReplayRole(ctx)
        await role.setup()
        task = asyncio.create_task(role.run())
        push = t.connect(zmq.PUSH, role.endpoints["fragments"])
        dealer = t.connect(zmq.DEALER, role.endpoints["requests"])
        try:
            yield role, push, dealer
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def _reply(dealer, stats) -> wire.Batch:
    async with asyncio.timeout(5):
        _, msg = await recv(dealer, stats)
    return msg


async def test_fifo_shard_validates_once_and_serves_each_fragment_once_by_credit(tmp_path):
    stats = WireStats(get_logger(role="test"), 60.0)
    over = ["sampling.fragment_length=16", "sampling.num_envs_per_worker=2"]
    async with shard_role(tmp_path, "cartpole_ppo.toml", over) as (role, push, dealer):
        good = cartpole_fragment(16, 2, 1)
        bad = cartpole_fragment(16, 2, 2)
        bad["obs"][3, 1, 2] = np.inf
        await send(push, wire.Fragment(version=3, arrays=bad), "sampler-0")
        await send(push, wire.Fragment(version=3, arrays=good), "sampler-0")
        await send(dealer, wire.SampleRequest(credit=2), "learner-0")
        got = await _reply(dealer, stats)
        assert got.version == 3 and got.sampler == "sampler-0"
        np.testing.assert_array_equal(got.arrays["obs"], good["obs"])
        assert role.rejected == 1 and role.served == 1 and role.store.size == 0
        with pytest.raises(TimeoutError):  # served once: nothing more, credit kept
            await _reply(dealer, stats)
        await send(push, wire.Fragment(version=4, arrays=good), "sampler-1")
        assert (await _reply(dealer, stats)).version == 4


async def test_prioritized_shard_applies_priorities_by_generation(tmp_path):
    stats = WireStats(get_logger(role="test"), 60.0)
    over = ["sampling.fragment_length=16", "sampling.num_envs_per_worker=2",
            "replay.min_size_to_sample=8", "replay.samples_per_insert=0",
            "replay.snapshot_interval_s=0"]
    async with shard_role(tmp_path, "cartpole_dqn.toml", over) as (role, push, dealer):
        a = cartpole_fragment(16, 2, 1)
        a.pop("logp"), a.pop("value"), a.pop("bootstrap_logp"), a.pop("bootstrap_value")
        q = {"q_taken": np.zeros((16, 2), np.float32), "q_max": np.zeros((16, 2), np.float32),
             "bootstrap_q_taken": np.zeros(2, np.float32),
             "bootstrap_q_max": np.zeros(2, np.float32)}
        await send(push, wire.Fragment(version=0, arrays={**a, **q}), "sampler-0")
        await send(dealer, wire.SampleRequest(credit=1, batch_size=8), "learner-0")
        got = (await _reply(dealer, stats)).arrays
        assert got["obs"].shape == (8, 4) and got["env_steps"][0] == 32
        idx, gen = got["index"], got["generation"]
        stale = gen.copy()
        stale[0] += 1  # as if slot idx[0] had been overwritten since
        await send(dealer, wire.PriorityUpdate(arrays={
            "index": idx, "generation": stale, "priority": np.full(8, 5.0)}), "learner-0")
        await send(dealer, wire.PriorityUpdate(arrays={"index": idx}), "learner-0")
        async with asyncio.timeout(5):
            while role.store.priority_updates + role.store.stale_updates < 8:
                await asyncio.sleep(0.01)
        assert role.store.stale_updates >= 1 and role.wire_stats.errors == 1


async def test_a_drained_feed_takes_nothing_and_asks_for_nothing():
    async with sockets() as t:
        shard = FakeShard(t)
        state = TrainState()
        feed = fragment_feed(t, state, batch_size=32, prefetch=1)
        await feed.reconcile({"replay-0": ShardAddress(shard.endpoint, 1)})
        await shard.take(1)
        ident = shard.requests[0][0]
        feed.drain()  # training is over
        await shard.serve(ident, fragment())
        await shard.drain_requests(settle=0.3)
        assert len(shard.requests) == 1 and not feed.pending and state.env_steps == 0
        feed.links.close_all()


def test_ephemeral_binds_leave_the_reserved_registry_port_alone(ports):
    """A member that binds before the registry (or while it restarts) must not take
    the registry's port: every ephemeral bind skips it, and a full range says so."""
    lo = ports[0]
    zctx = zmq.asyncio.Context()
    t = Transport(zctx, port_range=(lo, lo + 3), reserved=frozenset({lo}))
    try:
        taken = {int(t.bind(zmq.PULL, f"s{i}")[1].rsplit(":", 1)[1]) for i in range(3)}
        assert taken == {lo + 1, lo + 2, lo + 3}
        with pytest.raises(zmq.ZMQError, match="no free port"):
            t.bind(zmq.PULL, "one-too-many")
        t.bind(zmq.ROUTER, "registry", port=lo)  # asked for by number, it is there
    finally:
        t.close()
        zctx.term()


def test_a_shard_that_stops_reading_holds_a_few_fragments_not_thousands(ports):
    """What waits between a sampler and a paused shard is bounded in bytes as well as
    in messages: left to TCP's autotuning, loopback buffers held over a thousand
    small fragments, experience that reached the learner long after its policy."""
    from verl_zmq.batch import job_layout
    from verl_zmq.envs.make import env_spec

    job = load_job(CONFIGS / "cartpole_dqn.toml", [])
    T, E = job.sampling.fragment_length, job.sampling.num_envs_per_worker
    kbuf = job_layout(job, env_spec(job.environment)).queue_bytes(E)
    frames = wire.encode(wire.Fragment(version=1, arrays=cartpole_fragment(T, E)))
    size = sum(memoryview(f).nbytes for f in frames)
    assert size <= kbuf  # the estimate covers a real fragment of the job

    async def sent_until_full() -> int:
        zctx = zmq.asyncio.Context()
        t = Transport(zctx, port_range=tuple(ports))
        try:
            pull, ep = t.bind(zmq.PULL, "fragments", hwm=2, kernel_buffer=kbuf)
            push = t.connect(zmq.PUSH, ep, hwm=2, kernel_buffer=kbuf)
            n, stalls = 0, 0
            while stalls < 5:  # the I/O thread drains into the kernel asynchronously
                try:
                    await push.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
                    n, stalls = n + 1, 0
                except zmq.Again:
                    stalls += 1
                    await asyncio.sleep(0.1)
                assert n < 1000, "the link kept taking fragments"
            return n
        finally:
            t.close()
            zctx.term()

    n = asyncio.run(asyncio.wait_for(sent_until_full(), 30))
    # two high-water marks of 2 and two kernel buffers of ~2 fragments (Linux doubles
    # the size asked for): about a dozen (without the buffers: over a thousand)
    assert 2 <= n <= 24, n
