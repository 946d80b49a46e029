"""Replay storage and samplers against brute force and hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_zmq.replay.samplers import PrioritizedSampler, UniformSampler
from verl_zmq.replay.storage import RingStorage
from verl_zmq.replay.sumtree import SumTree


@settings(max_examples=200, deadline=None)
@given(cap=st.integers(1, 70), updates=st.lists(
    st.tuples(st.integers(0, 69), st.floats(0, 100, allow_nan=False)), min_size=1, max_size=120))
def test_sumtree_matches_brute_force(cap, updates):
    tree = SumTree(cap)
    ref = np.zeros(cap)
    idx = np.array([i % cap for i, _ in updates])
    val = np.array([v for _, v in updates])
    half = len(idx) // 2  # some one at a time, the rest as one batch (duplicates included)
    for i, v in zip(idx[:half], val[:half]):
        tree.update(np.array([i]), np.array([v]))
        ref[i] = v
    tree.update(idx[half:], val[half:])
    for i, v in zip(idx[half:], val[half:]):
        ref[i] = v
    assert tree.total == pytest.approx(ref.sum(), rel=1e-9, abs=1e-9)
    np.testing.assert_allclose(tree.get(np.arange(cap)), ref)
    if ref.sum() > 0:
        cum = np.cumsum(ref)
        qs = np.linspace(0, ref.sum(), 37, endpoint=False)
        expect = np.searchsorted(cum, qs, side="right")
        np.testing.assert_array_equal(tree.find(qs), np.minimum(expect, cap - 1))


def test_sumtree_by_hand():
    t = SumTree(4)
    t.update(np.array([0, 1, 2, 3]), np.array([1.0, 2.0, 3.0, 4.0]))
    assert t.total == 10.0
    assert t.find(np.array([0.0, 0.99, 1.0, 2.99, 3.0, 5.99, 6.0, 9.99])).tolist() == \
        [0, 0, 1, 1, 2, 2, 3, 3]


def test_importance_weights_by_hand():
    s = PrioritizedSampler(4, alpha=1.0, beta=0.5, eps=0.0)
    s.update(np.arange(4), np.array([1.0, 2.0, 3.0, 4.0]))
    idx, w = s.sample(400, size=4)
    # P = p / 10; w = (N P)^-beta / max; the max is for the smallest P drawn (index 0)
    expected = (4 * np.array([0.1, 0.2, 0.3, 0.4])) ** -0.5
    np.testing.assert_allclose(w, (expected / expected[idx].max())[idx], rtol=1e-6)
    counts = np.bincount(idx, minlength=4) / 400
    np.testing.assert_allclose(counts, [0.1, 0.2, 0.3, 0.4], atol=0.02)  # stratified
    assert s.beta(0.5) == pytest.approx(0.75) and s.beta(2.0) == 1.0


def test_new_items_enter_at_the_running_max_priority():
    s = PrioritizedSampler(8, alpha=1.0, eps=0.0)
    s.on_insert(np.array([0, 1]))
    s.update(np.array([0]), np.array([5.0]))
    s.on_insert(np.array([2]))
    assert s.tree.get(np.array([2]))[0] == 5.0
    s.on_insert(np.array([3]), priorities=np.array([0.5]))
    assert s.tree.get(np.array([3]))[0] == 0.5


def test_uniform_sampler_covers_the_stored_range():
    idx, w = UniformSampler(100, seed=1).sample(1000, size=10)
    assert idx.min() == 0 and idx.max() == 9 and (w == 1).all()


def test_ring_storage_wraps_and_counts_generations():
    st_ = RingStorage(4)
    a = st_.add({"x": np.arange(3, dtype=np.float32), "y": np.zeros((3, 2), np.int64)})
    assert a.tolist() == [0, 1, 2] and st_.size == 3
    b = st_.add({"x": np.array([3.0, 4.0], np.float32), "y": np.ones((2, 2), np.int64)})
    assert b.tolist() == [3, 0] and st_.size == 4 and st_.inserted == 5
    assert st_.generation.tolist() == [2, 1, 1, 1]
    assert st_.get(np.array([0]))["x"][0] == 4.0
    with pytest.raises(ValueError):
        st_.add({"x": np.zeros(1, np.float32)})
