"""The compression of gradient pushes: each scheme decodes to a vector of the
right size, TernGrad is unbiased and takes 2 bits an element, 1-bit signs and
top-k carry what they drop into the next push (error feedback), and a push that
does not fit is refused."""

from __future__ import annotations

import numpy as np
import pytest

from verl_zmq.learning.gossip import grad_codec
from verl_zmq.learning.gossip.grad_codec import GradEncoder, decode, nbytes


def test_every_scheme_round_trips_and_shrinks():
    rng = np.random.default_rng(0)
    g = rng.standard_normal(10_001).astype(np.float32)
    sizes = {}
    for scheme in grad_codec.SCHEMES:
        enc = GradEncoder(scheme, np.random.default_rng(1), topk_fraction=0.01)
        push = enc.encode(g)
        out = decode(push, g.size)
        assert out.shape == g.shape and out.dtype == np.float32 and np.isfinite(out).all()
        sizes[scheme] = nbytes(push)
    assert sizes["none"] == 4 * g.size and sizes["fp16"] == 2 * g.size
    assert sizes["terngrad"] <= g.size // 4 + 32  # 2 bits an element
    assert sizes["sign"] <= g.size // 8 + 32  # 1 bit
    assert sizes["none"] / sizes["terngrad"] >= 10 and sizes["none"] / sizes["sign"] >= 10


def test_terngrad_is_unbiased():
    g = np.linspace(-1, 1, 64).astype(np.float32)
    enc = GradEncoder("terngrad", np.random.default_rng(0))
    mean = np.mean([decode(enc.encode(g), g.size) for _ in range(4000)], axis=0)
    assert np.abs(mean - g).max() < 0.06


@pytest.mark.parametrize("scheme", ["sign", "topk_delta"])
def test_error_feedback_carries_what_was_dropped(scheme):
    """Over many pushes of the same gradient the decoded sum tracks the true sum."""
    g = np.random.default_rng(3).standard_normal(500).astype(np.float32)
    enc = GradEncoder(scheme, np.random.default_rng(0), topk_fraction=0.05)
    total = np.zeros_like(g)
    for _ in range(1000):
        total += decode(enc.encode(g), g.size)
    assert np.abs(total / 1000 - g).max() < 0.15 * np.abs(g).max()


def test_a_push_that_does_not_fit_is_refused():
    enc = GradEncoder("terngrad", np.random.default_rng(0))
    push = enc.encode(np.ones(100, np.float32))
    with pytest.raises(ValueError, match="another size"):
        decode(push, 101)
    bad = dict(push, tern=np.full_like(push["tern"], 0xFF))  # code 3: not -1, 0 or 1
    with pytest.raises(ValueError, match="terngrad codes"):
        decode(bad, 100)
    with pytest.raises(ValueError, match="not finite"):
        decode({"grad": np.array([np.nan], np.float32)}, 1)
    with pytest.raises(ValueError, match="out of range"):
        decode({"idx": np.array([5], np.int32), "val": np.ones(1, np.float32),
                "size": np.array([3])}, 3)
    with pytest.raises(ValueError, match="no gradient"):
        decode({"size": np.array([3])}, 3)
