"""The codec: round trips for every kind, and nothing but WireError on bad input."""

from __future__ import annotations

import contextlib
import random

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from verl_zmq import wire
from verl_zmq.wire.samples import mutate, samples

SAMPLES = samples()
KINDS = [type(m).__name__ for m in SAMPLES]


def _eq(a, b) -> None:
    assert type(a) is type(b)
    for f in a.__dataclass_fields__:
        x, y = getattr(a, f), getattr(b, f)
        if f == "arrays":
            assert set(x) == set(y)
            for k in x:
                assert np.asarray(x[k]).dtype == y[k].dtype and np.array_equal(x[k], y[k])
        elif f != "t":
            assert x == y, f


def test_every_kind_has_a_sample():
    assert {type(m).KIND for m in SAMPLES} == set(wire.KINDS)


@pytest.mark.parametrize("msg", SAMPLES, ids=KINDS)
def test_round_trip(msg):
    frames = wire.encode(msg)
    _eq(msg, wire.decode([bytes(f) for f in frames]))


def test_large_arrays_travel_as_frames_small_inline():
    msg = wire.Params(version=1, arrays={"big": np.zeros(wire.INLINE_MAX // 4 + 1, np.float32),
                                         "small": np.zeros(10, np.float32)})
    frames = wire.encode(msg)
    assert len(frames) == 2
    assert memoryview(frames[1]).nbytes == (wire.INLINE_MAX // 4 + 1) * 4
    out = wire.decode(frames)
    assert out.arrays["big"].shape == (wire.INLINE_MAX // 4 + 1,)


def test_non_contiguous_and_big_endian_arrays_are_fixed_on_encode():
    a = np.arange(20, dtype=">f8").reshape(4, 5)[:, ::2]
    out = wire.decode(wire.encode(wire.Fragment(arrays={"a": a})))
    assert out.arrays["a"].dtype == np.dtype("<f8")
    assert np.array_equal(out.arrays["a"], a)


def _header(msg) -> dict:
    return msgpack.unpackb(bytes(wire.encode(msg)[0]), raw=False)


@pytest.mark.parametrize("change, why", [
    (lambda h: h.update(v=2), "protocol version"),
    (lambda h: h.update(k=99), "unknown kind"),
    (lambda h: h["f"].update(version="3"), "expected int"),
    (lambda h: h["f"].update(extra=1), "unknown field"),
    (lambda h: h["a"][0].__setitem__(1, "|O"), "not allowed"),
    (lambda h: h["a"][0].__setitem__(1, ">f4"), "not allowed"),
    (lambda h: h["a"][0].__setitem__(2, [10**8, 10**8]), "bytes for shape"),
    (lambda h: h["a"][0].__setitem__(2, [-1]), "bad shape"),
    (lambda h: h["a"][0].__setitem__(3, 5), "bad data reference"),
    (lambda h: h.update(src=b"x"), "expected str"),
])
def test_specific_rejections(change, why):
    h = _header(wire.Params(version=3, arrays={"obs": np.zeros((2, 3), np.float32)}))
    change(h)
    with pytest.raises(wire.WireError, match=why):
        wire.decode([msgpack.packb(h, use_bin_type=True)])


def _packed(**arrays):
    frames = [bytes(f) for f in wire.encode(wire.Fragment(version=3, arrays=arrays))]
    return msgpack.unpackb(frames[0], raw=False), frames


def test_experience_travels_packed_and_is_forwarded_as_it_came():
    frag = {"obs": np.arange(48, dtype=np.float32).reshape(3, 2, 8)[:, :, ::2],  # strided
            "done": np.array([[True, False]] * 3), "action": np.arange(6).reshape(3, 2),
            "big": np.ones(wire.INLINE_MAX // 4 + 1, np.float32)}
    h, frames = _packed(**frag)
    assert h["a"][0][0] == "big" and [e[0] for e in msgpack.unpackb(h["p"][0])] == [
        "obs", "done", "action"]
    assert len(frames) == 3  # header, the packed small arrays, the big one
    out = wire.decode(frames)
    for k, v in frag.items():
        np.testing.assert_array_equal(out.arrays[k], v)
        assert out.arrays[k].dtype == v.dtype
    again = wire.decode([bytes(f) for f in wire.encode(wire.Batch(arrays=out.arrays))])
    for k, v in frag.items():
        np.testing.assert_array_equal(again.arrays[k], v)


def test_arena_columns_travel_as_the_packed_form_without_a_copy():
    frag = {"obs": np.arange(30, dtype=np.float32).reshape(3, 2, 5),
            "done": np.array([[True, False]] * 3), "action": np.arange(6).reshape(3, 2)}
    arena = wire.Arena([(k, v.dtype, v.shape) for k, v in frag.items()])
    blob, cols = arena.columns()
    for k, v in frag.items():
        cols[k][...] = v  # written in place
    rest = {"ep_return": np.array([1.5, 2.0]), "scalar": np.float64(3.0)}
    arrays = arena.message_arrays(blob, cols, rest)
    assert arrays["obs"] is cols["obs"] and set(arrays) == {*frag, *rest}
    frames = wire.encode(wire.Fragment(version=2, arrays=arrays))
    h = msgpack.unpackb(frames[0])
    # the layout the generic encoder builds for the same columns, and the arena's
    # own buffer as the packed frame: nothing copied
    assert h["p"][0] == _packed(**frag)[0]["p"][0] and frames[h["p"][1]] is blob
    out = wire.decode([bytes(f) for f in frames])
    for k, v in {**frag, **rest}.items():
        np.testing.assert_array_equal(out.arrays[k], v)
        assert out.arrays[k].dtype == np.asarray(v).dtype
    a2, _ = arena.columns()
    assert a2 is not blob  # a fresh buffer each time: the last may be in flight
    with pytest.raises(ValueError, match="also a column"):
        arena.message_arrays(blob, cols, {"obs": np.zeros(2)})
    with pytest.raises(ValueError, match="cannot travel"):
        wire.Arena([("s", np.dtype("U3"), (2,))])


@pytest.mark.parametrize("change, why", [
    (lambda h, f: h["p"].__setitem__(0, b"junk"), "packed layout"),
    (lambda h, f: h["p"].__setitem__(0, msgpack.packb([["x", "|O", [2]]])), "not allowed"),
    (lambda h, f: h["p"].__setitem__(0, msgpack.packb([["x", "<f4", [2]]] * 2)), "twice"),
    (lambda h, f: h["p"].__setitem__(0, msgpack.packb([["x", "<f4", [9]]])), "layout needs"),
    (lambda h, f: h["p"].__setitem__(1, 7), "packed data reference"),
    (lambda h, f: h.__setitem__("p", [1, 2, 3]), "bad packed arrays"),
    (lambda h, f: h["a"].append(["obs", "<f4", [2], b"\0" * 8]), "twice"),
    (lambda h, f: f.append(b"extra"), "not described"),
])
def test_packed_rejections(change, why):
    h, frames = _packed(obs=np.zeros((2, 3), np.float32), done=np.zeros(2, bool))
    change(h, frames)
    with pytest.raises(wire.WireError, match=why):
        wire.decode([msgpack.packb(h, use_bin_type=True), *frames[1:]])


def test_frame_count_mismatch_and_ext_types_rejected():
    frames = wire.encode(wire.Params(arrays={"w": np.zeros(wire.INLINE_MAX, np.float32)}))
    with pytest.raises(wire.WireError):
        wire.decode(frames[:1])
    with pytest.raises(wire.WireError):
        wire.decode(list(frames) + [b"extra"])
    ext = msgpack.packb({"v": 1, "k": 17, "f": {"reason": msgpack.ExtType(1, b"x")}})
    with pytest.raises(wire.WireError):
        wire.decode([ext])


def test_ten_thousand_seeded_mutations_raise_only_wire_error():
    rng = random.Random(1234)
    encoded = [[bytes(f) for f in wire.encode(m)] for m in SAMPLES]
    outcomes = {"ok": 0, "rejected": 0}
    for n in range(10_000):
        frames = mutate(encoded[n % len(encoded)], rng)
        try:
            wire.decode(frames)
            outcomes["ok"] += 1
        except wire.WireError:
            outcomes["rejected"] += 1
    assert outcomes["rejected"] > 5_000  # most mutations must be caught


msgpack_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**64, 2**64 - 1) | st.floats() | st.text(max_size=20)
    | st.binary(max_size=40),
    lambda children: st.lists(children, max_size=5)
    | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=20,
)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(frames=st.lists(st.binary(max_size=300), min_size=0, max_size=4))
def test_random_frames_raise_only_wire_error(frames):
    with contextlib.suppress(wire.WireError):
        wire.decode(frames)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(kind=st.sampled_from(sorted(wire.KINDS)), fields=st.dictionaries(
    st.sampled_from(["version", "members", "member", "ok", "credit", "values", "arrays",
                     "reason", "op", "status", "incarnation", "x"]), msgpack_values, max_size=4),
    arrays=st.lists(msgpack_values, max_size=3), extra=st.lists(st.binary(max_size=40), max_size=2))
def test_random_headers_raise_only_wire_error(kind, fields, arrays, extra):
    header = {"v": 1, "k": kind, "src": "fuzz", "seq": 1, "t": 0.0, "f": fields, "a": arrays}
    try:
        packed = msgpack.packb(header, use_bin_type=True)
    except (OverflowError, ValueError, TypeError):
        return
    with contextlib.suppress(wire.WireError):
        wire.decode([packed, *extra])


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(idx=st.integers(0, len(SAMPLES) - 1), seed=st.integers(0, 2**32 - 1))
def test_mutated_valid_messages_raise_only_wire_error(idx, seed):
    frames = [bytes(f) for f in wire.encode(SAMPLES[idx])]
    with contextlib.suppress(wire.WireError):
        wire.decode(mutate(frames, random.Random(seed)))


def test_a_readable_socket_with_nothing_to_read_is_waited_on_not_a_failure():
    """libzmq may say a socket is readable and then have nothing for recv (it handled
    a peer's disconnect instead): zmq.Again is a wait, not a failed role."""
    import asyncio

    import zmq

    from verl_zmq.comm.messaging import WireStats, recv

    frames = wire.encode(wire.Heartbeat(src="a"))

    class Flaky:
        def __init__(self):
            self.calls = 0

        async def poll(self, timeout):
            return zmq.POLLIN

        async def recv_multipart(self, copy=True):
            self.calls += 1
            if self.calls < 3:
                raise zmq.Again()
            return [zmq.Frame(bytes(memoryview(f))) for f in frames]

    sock = Flaky()
    _, msg = asyncio.run(recv(sock, WireStats(None, 1.0)))
    assert isinstance(msg, wire.Heartbeat) and sock.calls == 3
