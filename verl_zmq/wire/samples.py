"""One valid example of every message kind: for tests, fuzzers and benchmarks."""

from __future__ import annotations

import random

import msgpack
import numpy as np

from .. import wire


def member(i: int = 0) -> wire.Member:
    return wire.Member(id=f"sampler-{i}", role="sampler", group="main", incarnation=7 + i,
                       host="127.0.0.1", index=i, endpoints={"fragments": "tcp://127.0.0.1:1"},
                       versions={"verl_zmq": "0.1.0", "python": "3.11"})


def cartpole_fragment(T: int = 128, E: int = 8, seed: int = 0) -> dict[str, np.ndarray]:
    """The arrays of a T x E CartPole PPO fragment, as a sampler ships them."""
    rng = np.random.default_rng(seed)
    return {
        "obs": rng.standard_normal((T, E, 4), dtype=np.float32),
        "action": rng.integers(0, 2, (T, E), dtype=np.int64),
        "reward": np.ones((T, E), np.float32),
        "terminated": rng.random((T, E)) < 0.02,
        "truncated": np.zeros((T, E), bool),
        "valid": np.ones((T, E), bool),
        "logp": rng.standard_normal((T, E), dtype=np.float32),
        "value": rng.standard_normal((T, E), dtype=np.float32),
        "bootstrap_obs": rng.standard_normal((E, 4), dtype=np.float32),
        "bootstrap_logp": np.zeros(E, np.float32),
        "bootstrap_value": np.zeros(E, np.float32),
        "ep_return": np.array([21.0, 35.0]),
        "ep_length": np.array([21, 35]),
    }


def schema_mismatches(T: int = 16, E: int = 2, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Fragments that decode but disagree with a CartPole job's columns: a structured
    observation (Dict keys `obs.goal`, `obs.position`) where a plain one belongs,
    an observation column of the wrong dtype, of the wrong shape, and an extra key
    missing its bootstrap twin. A shard counts and drops each."""
    base = cartpole_fragment(T, E, seed)
    rng = np.random.default_rng(seed)
    dict_obs = {k: v for k, v in base.items() if k not in ("obs", "bootstrap_obs")}
    dict_obs |= {"obs.goal": rng.integers(0, 25, (T, E)), "bootstrap_obs.goal": np.zeros(E, int),
                 "obs.position": rng.random((T, E, 2), dtype=np.float32),
                 "bootstrap_obs.position": np.zeros((E, 2), np.float32)}
    return [dict_obs,
            {**base, "obs": base["obs"].astype(np.float64)},
            {**base, "obs": base["obs"][..., :3]},
            {**base, "action": base["action"].astype(np.float32)}]


def as_sampler_ships(arrays: dict[str, np.ndarray],
                     varying: tuple[str, ...] = ("ep_return", "ep_length")) -> wire.LazyArrays:
    """The same arrays as a sampler ships them: the fixed columns in one arena
    buffer (a sampler writes them there while it steps; here they are copied in),
    the `varying` ones beside it."""
    arena = wire.Arena([(k, v.dtype, v.shape) for k, v in arrays.items() if k not in varying])
    blob, cols = arena.columns()
    for k, v in cols.items():
        v[...] = arrays[k]
    return arena.message_arrays(blob, cols, {k: arrays[k] for k in varying if k in arrays})


def params_arrays(nbytes: int = 1 << 20, seed: int = 0) -> dict[str, np.ndarray]:
    """About `nbytes` of float32 weights in a few tensors, like a policy's state dict."""
    rng = np.random.default_rng(seed)
    n = nbytes // 4
    return {"pi.0.weight": rng.standard_normal((n // 2 // 256, 256), dtype=np.float32),
            "pi.0.bias": rng.standard_normal(256, dtype=np.float32),
            "v.0.weight": rng.standard_normal((n // 2 // 256, 256), dtype=np.float32),
            "v.0.bias": rng.standard_normal(256, dtype=np.float32)}


def samples() -> list[wire.Message]:
    frag = cartpole_fragment(16, 2)
    return [
        wire.Register(member=member()),
        wire.RegisterReply(ok=True, pub_endpoint="tcp://127.0.0.1:2", members_seq=3,
                           members=[member(0), member(1)]),
        wire.Heartbeat(incarnation=7, status={"size": 3.0}),
        wire.HeartbeatReply(known=True, members_seq=3),
        wire.Deregister(incarnation=7),
        wire.SnapshotRequest(),
        wire.MembershipSnapshot(members_seq=3, members=[member(2)]),
        wire.MembershipDelta(members_seq=4, op="leave", member=member(1)),
        wire.Fragment(version=3, arrays=frag),
        wire.SampleRequest(credit=4, batch_size=256),
        wire.Batch(version=3, inserted_t=1.5, sampler="sampler-0", arrays=frag),
        wire.PriorityUpdate(arrays={"index": np.arange(8), "generation": np.zeros(8, np.int64),
                                    "priority": np.ones(8)}),
        wire.Params(version=5, env_steps=1000, arrays=params_arrays(100_000)),
        wire.GossipHello(fingerprint="ab" * 32, reward=1.5, version=2, members=[member()]),
        wire.GossipParams(request=False, fingerprint="cd" * 32, arrays={"w": np.ones(4)}),
        wire.GossipGrads(round=3, scalars={"approx_kl": 0.01},
                         arrays={"grad": np.ones(16, np.float32)}),
        wire.GossipBatch(update=3, reward=1.5, arrays=frag),
        wire.ToolCall(id=7, tool="calc", arguments='{"expression": "2 * 3"}', state="null"),
        wire.ToolAnswer(id=7, text="6", state="null"),
        wire.ToolAnswer(id=8, error="timed out after 10 s"),
        wire.ScoreRequest(id=9, arrays={"items": np.frombuffer(b'[[[["user", "2*3?"]], "6"]]',
                                                                np.uint8)}),
        wire.ScoreReply(id=9, arrays={"score": np.array([0.75], np.float32)}),
        wire.ScoreReply(id=10, error="the items are not UTF-8 JSON"),
        wire.Shutdown(reason="target_reached"),
        # a multi-agent policy's fragment: its name, and the agent of every step
        wire.Fragment(version=4, policy="predator",
                      arrays={**frag, "agent": np.tile(np.array([0, -1]), (16, 1))}),
    ]


def mutate(frames: list[bytes], rng: random.Random) -> list[bytes]:
    """A random corruption of a message's frames: bytes flipped, cut, inserted or
    dropped, frames added or removed, junk, or a header value replaced; what the
    codec tests and the fuzzers (tools/faults/) throw at decoders."""
    out = [bytearray(f) for f in frames]
    op = rng.randrange(7)
    i = rng.randrange(len(out))
    f = out[i]
    if op == 0 and f:
        for _ in range(rng.randint(1, 8)):
            f[rng.randrange(len(f))] = rng.randrange(256)
    elif op == 1:
        del f[rng.randrange(len(f) + 1):]
    elif op == 2:
        out.append(bytearray(rng.randbytes(rng.randrange(64))))
    elif op == 3 and len(out) > 1:
        out.pop(i)
    elif op == 4:
        f[rng.randrange(len(f) + 1):rng.randrange(len(f) + 1)] = rng.randbytes(rng.randrange(16))
    elif op == 5:
        out = [bytearray(rng.randbytes(rng.randrange(200))) for _ in range(rng.randint(1, 3))]
    else:
        h = msgpack.unpackb(bytes(out[0]), raw=False)
        h[rng.choice(list(h))] = rng.choice([None, 1, -1, "x", b"\x00", [], {}, 2**64 - 1, 1.5])
        out[0] = bytearray(msgpack.packb(h, use_bin_type=True))
    return [bytes(x) for x in out]
