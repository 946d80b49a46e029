"""Every `[gossip]` key is live in the mode that runs, or refused: `verl check`
names the modes that read a key set where the job's `gossip.mixing` does not,
and in the default asynchronous mode the queue's size and order, the staleness
bound and the compression each change what a peer does with a gradient."""

from __future__ import annotations

import asyncio
import dataclasses
import typing
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tests.conftest import CONFIGS
from verl_zmq import wire
from verl_zmq.config import ConfigError, load_job
from verl_zmq.config.checks import GOSSIP_READS
from verl_zmq.config.sections import Gossip
from verl_zmq.learning.gossip.async_mix import AsyncGradMixer
from verl_zmq.learning.gossip.grad_codec import GradEncoder

JOB = CONFIGS / "cartpole_dapo.toml"
ROUNDS_RESET = ("gossip.update_interval=5",)  # the shipped job's asynchronous key
ODD = {"neighbor_count": 3, "update_interval": 7, "selection_strategy": '"reward_based"',
       "topology": '"exponential"', "temperature": 3.0, "max_queue_size": 3,
       "priority_fn": '"recency"', "sync_interval": 9, "grad_staleness": 4,
       "round_deadline_s": 2.0, "mix_rate": 0.3, "staleness_updates": 11,
       "compression": '"terngrad"', "topk_fraction": 0.1,
       "share": '"gradients"'}


def test_every_key_is_read_by_some_mode_and_listed():
    keys = {f.name for f in dataclasses.fields(Gossip)} - {"mixing", "share_batch"}
    assert keys == set(ODD)
    assert set(GOSSIP_READS) == set(typing.get_args(typing.get_type_hints(Gossip)["mixing"]))
    assert keys == {k for reads in GOSSIP_READS.values() for k in reads}


@pytest.mark.parametrize("mode", sorted(GOSSIP_READS))
def test_a_key_the_mode_does_not_read_is_refused_naming_the_modes_that_do(mode):
    reset = ROUNDS_RESET if "update_interval" not in GOSSIP_READS[mode] else ()
    base = [f'gossip.mixing="{mode}"', *reset]
    load_job(JOB, base)  # the mode itself is fine
    for key, value in ODD.items():
        over = [*base, f"gossip.{key}={value}"]
        if key == "topk_fraction" and "compression" in GOSSIP_READS[mode]:
            over.append('gossip.compression="topk_delta"')
        if key in GOSSIP_READS[mode]:
            load_job(JOB, over)
            continue
        with pytest.raises(ConfigError) as e:
            load_job(JOB, over)
        assert f"gossip.{key}" in str(e.value) and repr(mode) in str(e.value), str(e.value)
        readers = [m for m, keys in GOSSIP_READS.items() if key in keys]
        assert all(repr(m) in str(e.value) for m in readers), str(e.value)


def test_topk_fraction_is_refused_without_topk_compression():
    with pytest.raises(ConfigError, match="topk_fraction"):
        load_job(JOB, ["gossip.topk_fraction=0.2"])


class _Node:
    """What the mixer reads of its gossip node."""

    def __init__(self, **gossip):
        self.job = SimpleNamespace(gossip=dataclasses.replace(Gossip(), **gossip))
        self.id = "peer-0"
        self.wire_stats = SimpleNamespace(reject=lambda *a: None)

    def reward(self) -> float:
        return 1.0


def _push(mixer: AsyncGradMixer, src: str, g: np.ndarray, reward: float) -> None:
    enc = GradEncoder(mixer.G.compression, np.random.default_rng(0))
    msg = wire.GossipGrads(round=0, scalars={"reward": reward, "sent": 0.0},
                           arrays=enc.encode(g))
    mixer.receive(src, msg)


def _step(mixer: AsyncGradMixer, g: np.ndarray) -> np.ndarray:
    p = torch.nn.Parameter(torch.zeros(g.size))
    p.grad = torch.from_numpy(g.copy())
    mixer.reduce([p], {})
    mixer.loop.run_until_complete(asyncio.sleep(0))  # the push it scheduled (to no one)
    return p.grad.numpy().copy()


def _mixer(**gossip) -> AsyncGradMixer:
    """A mixer on a loop of its own, run by hand (the role's runs beside the update)."""
    async def make():
        m = AsyncGradMixer(_Node(**gossip), lambda step: [], np.random.default_rng(0))
        m.size = 4
        return m
    return asyncio.new_event_loop().run_until_complete(make())


def test_the_queue_keeps_max_queue_size_pushes_chosen_by_priority_fn():
    own = np.zeros(4, np.float32)
    for fn, kept in (("reward", {3.0, 4.0}), ("recency", {3.0, 4.0})):
        m = _mixer(max_queue_size=2, priority_fn=fn)
        rewards = (4.0, 3.0, 1.0, 2.0) if fn == "reward" else (1.0, 2.0, 3.0, 4.0)
        for r in rewards:  # each push carries its reward as its gradient's value
            _push(m, f"p{r}", np.full(4, r, np.float32), r)
        assert len(m.inbox) == 2
        mixed = _step(m, own)  # (0 + a + b) / 3
        assert {a.reward for a in m.inbox} == set()
        np.testing.assert_allclose(mixed, np.full(4, sum(kept) / 3), rtol=1e-6)
    bigger = _mixer(max_queue_size=4)
    for r in (1.0, 2.0, 3.0, 4.0):
        _push(bigger, f"p{r}", np.full(4, r, np.float32), r)
    np.testing.assert_allclose(_step(bigger, own), np.full(4, 10.0 / 5), rtol=1e-6)


def test_grad_staleness_drops_what_waited_through_too_many_updates():
    for staleness, expect in ((0, 0.0), (1, 0.5 * 8 / 1.5)):
        m = _mixer(grad_staleness=staleness)
        _push(m, "p1", np.full(4, 8.0, np.float32), 1.0)
        m.reduce(None, {})  # an update opens: the push has waited through one
        # staleness 0 drops it; staleness 1 counts it 1 / (1 + 1)
        np.testing.assert_allclose(_step(m, np.zeros(4, np.float32)), np.full(4, expect),
                                   rtol=1e-6)


def test_compression_changes_the_bytes_each_push_takes():
    sizes = {}
    for scheme in ("none", "fp16", "terngrad", "sign"):
        enc = GradEncoder(scheme, np.random.default_rng(0))
        sizes[scheme] = sum(a.nbytes for a in enc.encode(
            np.random.default_rng(1).standard_normal(4096).astype(np.float32)).values())
    assert sizes["none"] > sizes["fp16"] > sizes["terngrad"] > sizes["sign"]
    assert sizes["none"] / sizes["sign"] >= 10
