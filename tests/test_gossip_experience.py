"""Experience gossip (`gossip.share = "experience"`, the asynchronous default):
a peer's batch widened with what its neighbours pushed, on the env axis; a
batch too far behind its sender's newest dropped; the queue bounded and ordered by
`priority_fn`; a push that does not fit the job refused and counted, never
trained on; a compressed push decoded to the job's columns; and a neighbour's
steps never counted as this peer's."""

from __future__ import annotations

import asyncio
import dataclasses
from types import SimpleNamespace

import numpy as np

from tests.conftest import CONFIGS
from verl_zmq import wire
from verl_zmq.batch import job_layout
from verl_zmq.config import load_job
from verl_zmq.envs.make import env_spec
from verl_zmq.learning.gossip.experience import ExperienceGossip

JOB = load_job(CONFIGS / "cartpole_dapo.toml").peer_view()
T = JOB.sampling.fragment_length


class _Node:
    """What the experience gossip reads of its node."""

    def __init__(self, **gossip):
        self.job = SimpleNamespace(gossip=dataclasses.replace(JOB.gossip, **gossip),
                                   experiment=JOB.experiment)
        self.id = "peer-0"
        self.rejected: list[str] = []
        self.wire_stats = SimpleNamespace(reject=lambda src, e: self.rejected.append(str(e)))

    def reward(self) -> float:
        return 1.0


def _gossip(**gossip) -> ExperienceGossip:
    layout = job_layout(JOB, env_spec(JOB.environment))

    async def make():
        return ExperienceGossip(_Node(**gossip), lambda update: [], layout)
    return asyncio.new_event_loop().run_until_complete(make())


def _batch(g: ExperienceGossip, envs: int, value: float) -> dict[str, np.ndarray]:
    """A batch of `envs` columns with the job's columns, every float entry `value`."""
    keep = (*g.layout.stepwise, *(f"bootstrap_{k}" for k in g.layout.twinned))
    return {k: (np.full(shape, value, dt) if dt.kind == "f" else np.zeros(shape, dt))
            for k, dt, shape in g.layout.fields(envs) if k in keep}


def _widen(g: ExperienceGossip, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    out = dict(g.widen(batch))
    g.loop.run_until_complete(asyncio.sleep(0))  # the push it scheduled (to no one)
    return out


def _push(g: ExperienceGossip, src: str, arrays: dict[str, np.ndarray], reward: float,
          update: int = 1) -> None:
    msg = wire.GossipBatch(update=update, reward=reward, arrays=arrays)
    msg.src, msg.seq = src, 0
    g.receive(src, wire.decode(wire.encode(msg)))  # as it comes off the wire


def test_a_batch_is_widened_on_the_env_axis_with_what_arrived():
    g = _gossip()
    assert _widen(g, _batch(g, 2, 0.0))["reward"].shape == (T, 2)  # nothing arrived yet
    _push(g, "peer-1", _batch(g, 3, 5.0), 1.0)
    out = _widen(g, _batch(g, 2, 0.0))
    assert out["reward"].shape == (T, 5)
    np.testing.assert_array_equal(out["reward"][:, 2:], 5.0)
    boot = [k for k in out if k.startswith("bootstrap_")]
    assert boot and all(out[k].shape[0] == 5 for k in boot)
    assert g.metrics()["gossip/batch_used"] == 1 and g.steps_used == 3 * T
    # used once: the next update trains on its own batch again
    assert _widen(g, _batch(g, 2, 0.0))["reward"].shape == (T, 2)


def test_a_batch_further_behind_its_senders_newest_than_grad_staleness_is_dropped():
    # a backlog from one sender (after a stall): its updates 1-4 arrive at once
    for staleness, kept in ((0, {4.0}), (2, {2.0, 3.0, 4.0})):
        g = _gossip(grad_staleness=staleness, max_queue_size=8)
        _widen(g, _batch(g, 2, 0.0))
        for u in (1, 2, 3, 4):
            _push(g, "peer-1", _batch(g, 1, float(u)), 1.0, update=u)
        _push(g, "peer-2", _batch(g, 1, 9.0), 1.0, update=1)  # another sender's newest
        out = _widen(g, _batch(g, 2, 0.0))
        assert set(np.unique(out["reward"][:, 2:])) == kept | {9.0}, staleness
        assert g.stats["batch_stale_dropped"] == 4 - len(kept)


def test_the_queue_keeps_max_queue_size_batches_chosen_by_priority_fn():
    for fn, kept in (("reward", {3.0, 4.0}), ("recency", {3.0, 4.0})):
        g = _gossip(max_queue_size=2, priority_fn=fn)
        _widen(g, _batch(g, 2, 0.0))
        rewards = (4.0, 3.0, 1.0, 2.0) if fn == "reward" else (1.0, 2.0, 3.0, 4.0)
        for r in rewards:  # each batch's reward column holds its sender's reward
            _push(g, f"p{r}", _batch(g, 1, r), r)
        out = _widen(g, _batch(g, 2, 0.0))
        assert set(np.unique(out["reward"][:, 2:])) == kept, fn
        assert g.stats["batch_queue_overflow"] == 2


def test_a_push_that_does_not_fit_is_refused_counted_and_never_trained_on():
    g = _gossip()
    _widen(g, _batch(g, 2, 0.0))
    good = _batch(g, 1, 1.0)
    bad = {
        "a column missing": {k: v for k, v in good.items() if k != "valid"},
        "a column added": {**good, "extra": np.zeros((T, 1), np.float32)},
        "another fragment length": {k: (v[:-1] if k in g.layout.stepwise else v)
                                    for k, v in good.items()},
        "another obs size": {**good, "obs": np.zeros((T, 1, 5), np.float32)},
        "another dtype": {**good, "reward": good["reward"].astype(np.float64)},
        "not finite": {**good, "reward": np.full((T, 1), np.nan, np.float32)},
        "an action out of range": {**good, "action": np.full((T, 1), 7, np.int64)},
    }
    for why, arrays in bad.items():
        _push(g, "peer-9", arrays, 1.0)
        assert len(g.node.rejected) == g.stats["batch_refused"], why
    assert g.stats["batch_refused"] == len(bad) and not g.inbox
    assert _widen(g, _batch(g, 2, 0.0))["reward"].shape == (T, 2)


def test_a_push_before_any_batch_of_ours_is_dropped_without_blame():
    g = _gossip()
    _push(g, "peer-1", _batch(g, 1, 1.0), 1.0)  # nothing to compare with yet
    assert not g.inbox and not g.node.rejected and g.stats["batch_refused"] == 0


def test_a_compressed_push_arrives_as_the_jobs_columns_and_a_mangled_one_is_refused():
    from verl_zmq.learning.gossip import batch_codec

    g = _gossip(compression="topk_delta")
    _widen(g, _batch(g, 2, 0.0))
    sent = _batch(g, 3, 5.0)
    sent["action"][:] = 1
    wire_arrays = batch_codec.encode(sent, "topk_delta", np.random.default_rng(0), g._lead)
    assert not set(sent) & set(wire_arrays)  # every column travels encoded
    _push(g, "peer-1", wire_arrays, 1.0)
    out = _widen(g, _batch(g, 2, 0.0))
    assert out["reward"].shape == (T, 5)
    for k, v in sent.items():  # constant columns: exact through 8-bit codes
        assert out[k].dtype == v.dtype
        np.testing.assert_array_equal(out[k][:, 2:] if k in g.layout.stepwise else out[k][2:],
                                      v)
    mangled = {**wire_arrays, "reward::shape": np.array([T + 1, 3], np.int32)}
    _push(g, "peer-1", mangled, 1.0)
    assert g.stats["batch_refused"] == 1 and "reward" in g.node.rejected[-1]
