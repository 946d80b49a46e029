"""Replay storage and samplers against brute force and hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_zmq.replay.index_samplers import PrioritizedSampler, UniformSampler
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


@pytest.mark.parametrize("cap", [4097, 70_001, 1_000_003])
def test_sumtree_large_descends_below_the_flat_top(cap):
    """Capacities past FLAT walk [batch, FANOUT] blocks below a flat-searched top."""
    rng = np.random.default_rng(cap)
    tree, ref = SumTree(cap), np.zeros(cap)
    for _ in range(5):  # integer priorities (some zero) keep every sum exact
        idx = rng.integers(0, cap, 2000)
        val = rng.integers(0, 4, 2000).astype(np.float64)
        tree.update(idx, val)
        last, first = np.unique(idx[::-1], return_index=True)  # the last write wins
        ref[last] = val[::-1][first]
    assert tree.total == ref.sum()
    qs = np.sort(rng.random(4096)) * ref.sum()
    expect = np.searchsorted(np.cumsum(ref), qs, side="right")
    np.testing.assert_array_equal(tree.find(qs), expect)


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


def _frag(rew, term, trunc, valid, T=None):
    rew = np.array(rew, np.float32)[:, None]
    T = len(rew)
    return {"obs": np.arange(T, dtype=np.float32)[:, None, None],
            "action": np.zeros((T, 1), np.int64), "reward": rew,
            "terminated": np.array(term, bool)[:, None],
            "truncated": np.array(trunc, bool)[:, None],
            "valid": np.array(valid, bool)[:, None],
            "bootstrap_obs": np.array([[float(T)]], np.float32)}


def test_n_step_returns_across_terminations_and_truncations():
    from verl_zmq.replay.transitions import unroll

    g = 0.5
    # steps: 0 1 2 (terminates) | 3 reset step | 4 5 (truncates) | 6 reset | 7 (fragment end)
    f = _frag(rew=[1, 2, 4, 0, 8, 16, 0, 32],
              term=[0, 0, 1, 0, 0, 0, 0, 0], trunc=[0, 0, 0, 0, 0, 1, 0, 0],
              valid=[1, 1, 1, 0, 1, 1, 0, 1])
    tr = unroll(f, g, 3)
    assert tr["obs"][:, 0].tolist() == [0, 1, 2, 4, 5, 7]
    # t0: 1 + .5*2 + .25*4, terminated inside: no bootstrap
    assert tr["reward"].tolist() == [3.0, 4.0, 4.0, 16.0, 16.0, 32.0]
    assert tr["discount"].tolist() == [0.0, 0.0, 0.0, 0.25, 0.5, 0.5]
    # truncated at 5: bootstrap from its final obs, recorded as the obs of step 6
    assert tr["next_obs"][:, 0].tolist() == [3.0, 3.0, 3.0, 6.0, 6.0, 8.0]
    one = unroll(f, g, 1)
    assert one["reward"].tolist() == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]
    assert one["discount"].tolist() == [0.5, 0.5, 0.0, 0.5, 0.5, 0.5]


def test_limiter_blocks_and_releases_as_specified():
    from verl_zmq.replay.limiter import RateLimiter

    lim = RateLimiter(samples_per_insert=2.0, min_size_to_sample=10, error_buffer=20.0)
    assert not lim.can_sample(1)          # below the minimum size
    lim.insert(10)
    assert lim.can_sample(40)             # 40 <= 2 * 10 + 20
    assert not lim.can_sample(41)
    lim.sample(40)
    assert not lim.can_sample(1)          # the learner is ahead: wait for inserts
    assert lim.can_insert(10)             # 40 >= 2 * 20 - 20
    lim.insert(10)
    assert lim.can_sample(20) and not lim.can_sample(21)
    assert not lim.can_insert(21)         # 40 < 2 * 41 - 20: the learner is behind
    lim.sample(20)
    assert lim.can_insert(10)


def test_limiter_refuses_a_deadlocking_configuration():
    from verl_zmq.replay.limiter import LimiterError, RateLimiter

    with pytest.raises(LimiterError, match="error_buffer"):
        RateLimiter(samples_per_insert=8.0, min_size_to_sample=100, error_buffer=4.0)
    RateLimiter(samples_per_insert=0.0, min_size_to_sample=1, error_buffer=0.0)


def test_priority_update_for_overwritten_slots_changes_nothing():
    from verl_zmq.config import load_job
    from verl_zmq.replay.offpolicy import OffPolicyStore

    job = load_job("configs/cartpole_dqn.toml", [
        "replay.capacity=256", "replay.min_size_to_sample=1", "replay.samples_per_insert=0",
        "sampling.fragment_length=32", "sampling.num_envs_per_worker=2"])
    store = OffPolicyStore(job)
    tr = {"obs": np.zeros((200, 4), np.float32), "action": np.zeros(200, np.int64),
          "reward": np.ones(200, np.float32), "next_obs": np.zeros((200, 4), np.float32),
          "discount": np.ones(200, np.float32)}
    store.insert((dict(tr), 200))
    batch = store.sample(16)
    store.insert((dict(tr), 200))  # wraps: overwrites slots 200..255 and 0..143
    before = store.sampler.tree.get(batch["index"]).copy()
    applied = store.update_priorities(batch["index"], batch["generation"], np.full(16, 50.0))
    after = store.sampler.tree.get(batch["index"])
    overwritten = (batch["index"] < 144) | (batch["index"] >= 200)
    assert applied == int((~overwritten).sum())
    np.testing.assert_array_equal(after[overwritten], before[overwritten])
    assert (after[~overwritten] > before[~overwritten]).all()
    assert store.stale_updates == int(overwritten.sum())


def test_actor_side_priorities_are_n_step_td_errors_from_recorded_q_values():
    from verl_zmq.algos.dqn import DQN
    from verl_zmq.config import load_job
    from verl_zmq.envs.make import EnvSpec

    job = load_job("configs/cartpole_dqn.toml", ["algorithm.params.n_step=2",
                                                  "algorithm.params.gamma=0.5"])
    algo = DQN(job, EnvSpec((1,), True, 2, ()))
    f = _frag(rew=[1, 2, 4], term=[0, 0, 1], trunc=[0, 0, 0], valid=[1, 1, 1])
    f["q_taken"] = np.array([[3.0], [1.0], [2.0]], np.float32)
    f["q_max"] = np.array([[5.0], [6.0], [7.0]], np.float32)
    f["bootstrap_q_taken"] = np.array([0.0], np.float32)
    f["bootstrap_q_max"] = np.array([9.0], np.float32)
    p = algo.finish_fragment(f)["priority"][:, 0]
    # t0: 1 + .5*2 + .25*max Q(s2)=7 -> 3.75 - 3; t1: 2 + .5*4, terminal -> 4 - 1; t2: 4 - 2
    assert p.tolist() == pytest.approx([0.75, 3.0, 2.0])
    tr = __import__("verl_zmq.replay.transitions", fromlist=["unroll"]).unroll(f | {
        "priority": algo.finish_fragment(f)["priority"]}, 0.5, 2)
    assert tr["priority"].tolist() == pytest.approx([0.75, 3.0, 2.0])


def test_incremental_snapshots_restore_what_a_full_one_would(tmp_path):
    """A full snapshot, then deltas (the ring wrapping meanwhile, priorities
    updated) read back as the store's whole state; a lost delta ends the chain at
    the file before it; a full snapshot removes the deltas it replaces."""
    from tests.test_spaces import _fragment
    from verl_zmq import wire
    from verl_zmq.replay import snapshot
    from verl_zmq.replay.offpolicy import OffPolicyStore

    job, _, frags = _fragment("cartpole_dqn.toml", ['replay.mode="prioritized"',
                                                    "replay.capacity=200"], 7)
    store = OffPolicyStore(job)
    rng = np.random.default_rng(0)
    base = 0  # the insert count at the last file written
    for i, f in enumerate(frags):
        store.insert(store.prepare(wire.Fragment(version=1, arrays=f)))
        idx = rng.integers(0, store.size, 10)
        store.sampler.update(idx, rng.uniform(0.1, 5.0, 10))
        delta = store.delta(base) if i else None
        if delta is None:
            assert i == 0 or store.storage.inserted - base >= store.storage.capacity
            snapshot.write(tmp_path, store.state())
        else:
            snapshot.write_delta(tmp_path, delta, i)
        base = store.storage.inserted
    want, got = OffPolicyStore(job), OffPolicyStore(job)
    want.load_state(store.state())
    got.load_state(snapshot.read(tmp_path))
    n = want.size
    assert got.size == n and got.storage.inserted == store.storage.inserted
    for k, v in want.storage.columns.items():
        assert np.array_equal(got.storage.columns[k][:n], v[:n]), k
    assert np.allclose(got.sampler.tree.get(np.arange(n)), want.sampler.tree.get(np.arange(n)))
    deltas = sorted(tmp_path.glob("delta-*.npz"))
    assert len(deltas) >= 2
    deltas[1].unlink()  # a gap: what came before it is what a restart gets
    first = snapshot.read(tmp_path)
    assert first is not None and int(first["counters"][2]) < store.storage.inserted
    snapshot.write(tmp_path, store.state())
    assert not list(tmp_path.glob("delta-*.npz"))
