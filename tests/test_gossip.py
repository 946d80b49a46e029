"""Gossip, mixing, compression and the DAPO loss, against exact counts (fixed
seeds) and hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from verl_zmq.algos.dapo import fragment_mean
from verl_zmq.algos.ppo import clipped_surrogate
from verl_zmq.learning.gossip import compress
from verl_zmq.learning.gossip import core as gossip


def test_random_selection_is_uniform_over_others():
    rng = np.random.default_rng(0)
    n, k, rounds = 6, 2, 3000
    counts = np.zeros((n, n))
    for r in range(rounds):
        nb = gossip.select_round("random", n, k, r, rng)
        assert nb.shape == (n, k)
        for i in range(n):
            assert i not in nb[i] and len(set(nb[i])) == k
            counts[i, nb[i]] += 1
    # each other peer with probability k / (n - 1); chi-square over the 5 others, 4 dof
    expected = rounds * k / (n - 1)
    for i in range(n):
        others = np.delete(counts[i], i)
        chi2 = ((others - expected) ** 2 / expected).sum()
        assert chi2 < 18.5  # p = 0.001 at 4 degrees of freedom


def test_reward_based_selection_follows_softmax():
    rng = np.random.default_rng(1)
    rewards = np.array([0.0, 10.0, 20.0, 30.0])
    draws = 20_000
    counts = np.zeros(4)
    for r in range(draws):
        counts[gossip.select_round("reward_based", 4, 1, r, rng, rewards, 10.0)[0, 0]] += 1
    p = gossip.reward_selection_probs(rewards, 0, 10.0)
    e = np.exp([1.0, 2.0, 3.0])
    np.testing.assert_allclose(p, np.r_[0.0, e / e.sum()])
    np.testing.assert_allclose(counts / draws, p, atol=0.012)


def test_topologies_and_dead_peers():
    assert gossip.topology_offsets("ring", 8, 2, 0) == [1, -1]
    assert [gossip.topology_offsets("exponential", 8, 2, r) for r in range(4)] == \
        [[1, -1], [2, -2], [4, 1], [1, -1]]
    nb = gossip.select_round("topology", 8, 2, 1, None, topology="exponential")
    assert nb[0].tolist() == [2, 6] and nb[7].tolist() == [1, 5]
    alive = np.ones(8, bool)
    alive[1] = False
    nb = gossip.select_round("topology", 8, 2, 0, None, topology="ring", alive=alive)
    assert nb[0].tolist() == [-1, 7] and nb[2].tolist() == [3, -1]  # edges to 1 skipped
    rnd = gossip.select_round("random", 8, 3, 0, np.random.default_rng(0), alive=alive)
    assert 1 not in rnd[[0, 2, 3]]
    assert gossip.select_round("random", 1, 2, 0, np.random.default_rng(0)).shape == (1, 0)


def test_mixing_weights_and_mix_by_hand():
    np.testing.assert_allclose(gossip.mixing_weights("uniform", [5.0, 1.0]), [0.5, 0.5])
    w = gossip.mixing_weights("reward_softmax", [0.0, np.log(3.0)], 1.0)
    np.testing.assert_allclose(w, [0.25, 0.75])
    theta = np.array([[0.0, 4.0]])
    others = np.array([[[2.0, 0.0], [6.0, 8.0]]])
    # (1 - 0.5) theta + 0.5 (0.25 * [2, 0] + 0.75 * [6, 8]) = [0, 2] + [2.5, 3]
    np.testing.assert_allclose(gossip.mix(theta, others, w[None], 0.5), [[2.5, 5.0]])
    mixed = gossip.mix_params({"w": np.array([[0.0, 4.0]], np.float32)},
                              [{"w": np.array([[2.0, 0.0]])}, {"w": np.array([[6.0, 8.0]])}],
                              w, 0.5)
    assert mixed["w"].dtype == np.float32 and mixed["w"].tolist() == [[2.5, 5.0]]


def test_priority_queue_order_and_bound():
    q = gossip.ParamQueue(3, "reward")
    for i, r in enumerate([3.0, 1.0, 4.0, 1.5, 5.0]):
        q.put(f"p{i}", {}, r, version=i, at_update=0)
    assert len(q) == 3 and q.dropped == 2
    assert [e.reward for e in q.drain()] == [5.0, 4.0, 3.0] and len(q) == 0
    q = gossip.ParamQueue(2, "recency")
    for i in range(4):
        q.put(f"p{i}", {}, 0.0, version=i, at_update=0)
    assert [e.src for e in q.drain()] == ["p3", "p2"]
    q = gossip.ParamQueue(2, "tests.test_gossip:by_version")
    for v in (7, 2, 9):
        q.put("x", {}, 0.0, version=v, at_update=0)
    assert [e.version for e in q.drain()] == [2, 7]  # the custom function: lowest first
    with pytest.raises(ValueError, match="module:function"):
        gossip.ParamQueue(2, "fastest")


def by_version(e: gossip.QueuedParams) -> float:
    return -float(e.version)


def _params(rng, scale=1.0):
    return {"a": (scale * rng.standard_normal((16, 8))).astype(np.float32),
            "b": (scale * rng.standard_normal(8)).astype(np.float32)}


def test_fp16_and_none_reconstruct_within_their_precision():
    rng = np.random.default_rng(0)
    x = _params(rng)
    wire, recon = compress.encode(x, "none", None)
    assert all(np.array_equal(recon[k], x[k]) for k in x)
    wire, recon = compress.encode(x, "fp16", None)
    got = compress.decode(wire, "fp16", None, x)
    for k in x:
        assert wire[k].dtype == np.float16
        np.testing.assert_allclose(got[k], x[k], rtol=2 ** -10, atol=2 ** -14)
        np.testing.assert_array_equal(got[k], recon[k])


def test_fp16_keeps_float32_for_a_tensor_beyond_halfs_range():
    """(observation statistics, say): never an infinity a receiver must refuse."""
    x = {"w": np.array([1.0, 1e6], np.float32), "b": np.ones(2, np.float32)}
    for scheme in ("fp16", "terngrad"):  # terngrad's first send (no base): half precision
        wire, recon = compress.encode(x, scheme, None)
        assert wire["w"].dtype == np.float32 and wire["b"].dtype == np.float16
        np.testing.assert_array_equal(compress.decode(wire, "fp16", None, x)["w"], x["w"])


def test_terngrad_params_never_err_above_a_change_and_error_feedback_converges():
    rng = np.random.default_rng(0)
    base, x = _params(rng), _params(rng)
    wire, recon = compress.encode(x, "terngrad", base)
    got = compress.decode(wire, "terngrad", base, x)
    for k in x:
        # 2 bits an element: codes 0, 1, 2 four to a byte, and one scale
        assert wire[f"{k}::tern"].dtype == np.uint8
        assert wire[f"{k}::tern"].size == (x[k].size + 3) // 4
        np.testing.assert_array_equal(got[k], recon[k])
        d, s = x[k] - base[k], float(wire[f"{k}::scale"][0])
        moved = np.abs(got[k] - base[k])
        assert np.all(np.isclose(moved, 0, atol=1e-5) | np.isclose(moved, s, rtol=1e-5))
        # each entry's error at most its change: what is fed back never grows
        assert np.all(np.abs(x[k] - got[k]) <= np.abs(d) + 1e-6)
        assert np.abs(x[k] - got[k]).sum() < 0.7 * np.abs(d).sum()
    # sending again against what the receiver holds converges to the params
    held = recon
    for _ in range(60):
        wire, sent = compress.encode(x, "terngrad", held)
        held = compress.decode(wire, "terngrad", held, x)
        np.testing.assert_array_equal(held["a"], sent["a"])
    for k in x:
        assert np.abs(held[k] - x[k]).max() < 1e-3 * np.abs(x[k] - base[k]).max()


def test_topk_delta_sends_the_largest_changes_and_feeds_back_the_rest():
    rng = np.random.default_rng(0)
    base, x = _params(rng), _params(rng)
    wire, recon = compress.encode(x, "topk_delta", base, topk_fraction=0.25)
    got = compress.decode(wire, "topk_delta", base, x)
    for k in x:
        delta = (x[k] - base[k]).reshape(-1)
        n = int(np.ceil(0.25 * delta.size))
        # the indices as gaps from the one before, a byte each (dense enough here)
        assert wire[f"{k}::gap"].size == n and wire[f"{k}::gap"].dtype == np.uint8
        sent = set(np.cumsum(wire[f"{k}::gap"], dtype=np.int64).tolist())
        assert sent == set(np.argsort(-np.abs(delta))[:n].tolist())
        err = (x[k] - got[k]).reshape(-1)
        # what was sent is exact to half precision (16-bit indices, fp16 values)
        assert wire[f"{k}::val"].dtype == np.float16
        assert np.all(np.abs(err[list(sent)]) <= 2 ** -10 * np.abs(delta[list(sent)]))
        # the rest is off by exactly the unsent change, never more
        assert np.abs(err).max() <= np.sort(np.abs(delta))[-n - 1] + 1e-6
    # error feedback: sending again against what the receiver holds converges, the
    # rounding of what was sent included
    held = recon
    for _ in range(12):
        wire, held2 = compress.encode(x, "topk_delta", held, topk_fraction=0.25)
        held = compress.decode(wire, "topk_delta", held, x)
        np.testing.assert_array_equal(held["a"], held2["a"])
    assert all(np.allclose(held[k], x[k], atol=1e-6) for k in x)


def test_topk_delta_sends_sparse_indices_whole():
    """Changes kept far apart (a gap over 255): 16-bit indices, not byte gaps."""
    base = {"w": np.zeros(4096, np.float32)}
    x = {"w": base["w"].copy()}
    x["w"][[7, 3000]] = [1.0, -2.0]
    wire, recon = compress.encode(x, "topk_delta", base, topk_fraction=2 / 4096)
    assert "w::gap" not in wire and wire["w::idx"].dtype == np.uint16
    np.testing.assert_array_equal(compress.decode(wire, "topk_delta", base, x)["w"], x["w"])


def test_decode_and_check_refuse_what_does_not_fit():
    rng = np.random.default_rng(0)
    x = _params(rng)
    with pytest.raises(ValueError, match="base"):
        compress.decode({"a::idx": np.zeros(1, np.int32), "a::val": np.zeros(1, np.float32)},
                        "topk_delta", None, x)
    bad_idx = {"a::idx": np.array([10_000], np.int32), "a::val": np.ones(1, np.float32),
               "b::idx": np.zeros(1, np.int32), "b::val": np.ones(1, np.float32)}
    with pytest.raises(ValueError, match="out of range"):
        compress.decode(bad_idx, "topk_delta", x, x)
    assert "shape" in gossip.check_like({"a": np.zeros((8, 16)), "b": x["b"]}, x)
    assert "names" in gossip.check_like({"a": x["a"]}, x)
    assert "finite" in gossip.check_like({"a": x["a"], "b": np.full(8, np.nan)}, x)
    assert "finite" in gossip.check_like({"a": x["a"], "b": np.zeros(8, np.int64)}, x)
    assert gossip.check_like(x, x) == ""
    assert gossip.fingerprint(x) == gossip.fingerprint({k: v.copy() for k, v in x.items()})
    y = {k: v.copy() for k, v in x.items()}
    y["b"][0] += 1e-6
    assert gossip.fingerprint(x) != gossip.fingerprint(y)


def test_decoupled_clip_loss_by_hand():
    old = torch.zeros(4)
    new = torch.log(torch.tensor([1.5, 1.5, 0.5, 0.5]))
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0])
    loss, ratio = clipped_surrogate(new, old, adv, 0.2, 0.28)
    # ratio 1.5, A > 0: min(1.5, 1.28) A -> loss -1.28; A < 0: max(-1.5 A, ...) -> 1.5
    # ratio 0.5, A > 0: min(0.5, 0.8) -> -0.5; A < 0: max(0.5, 0.8) -> 0.8
    assert loss.tolist() == pytest.approx([-1.28, 1.5, -0.5, 0.8])
    assert ratio.tolist() == pytest.approx([1.5, 1.5, 0.5, 0.5])


def test_loss_aggregation_step_and_fragment_mean():
    per_step = torch.tensor([1.0, 2.0, 3.0, 10.0])
    column = torch.tensor([0, 0, 0, 1])
    assert float(per_step.mean()) == 4.0
    assert float(fragment_mean(per_step, {"column": column})) == 6.0  # (mean(1, 2, 3) + 10) / 2


def test_dynamic_sampling_finds_fragments_without_signal():
    from tests.conftest import CONFIGS
    from verl_zmq.algos import make_algorithm
    from verl_zmq.config import load_job
    from verl_zmq.envs.make import EnvSpec

    job = load_job(CONFIGS / "cartpole_dapo.toml", ["algorithm.params.dynamic_sampling=true"])
    algo = make_algorithm(job, EnvSpec((4,), True, 2, (), (), ()))
    T, E = 4, 2
    flat = {"reward": np.zeros((T, E), np.float32), "value": np.zeros((T, E), np.float32),
            "terminated": np.zeros((T, E), bool), "truncated": np.zeros((T, E), bool),
            "valid": np.ones((T, E), bool), "bootstrap_value": np.zeros(E, np.float32)}
    assert not algo.informative(flat)
    signal = dict(flat, reward=np.ones((T, E), np.float32))
    assert algo.informative(signal)
