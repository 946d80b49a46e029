#!/usr/bin/env python
"""Wire codec speed: encode+decode of a 128-step x 8-env CartPole fragment and of
a 1 MB params message, against the floor measured in the same run (plain
msgpack.packb/unpackb of the same arrays as bytes). Prints times and ratios.

The fragment is timed twice: as samplers ship it (its fixed columns written in
place into one arena buffer while stepping, `wire.Arena`, so encoding copies
nothing) and as 13 separate arrays (the generic path any other sender takes:
the small arrays are copied into one packed frame).

`--frames`: where frame stacks are cheapest to build, for a 32-step x 8-env
fragment of 84x84 Atari frames stacked 4 deep. Either the sampler ships stacks
(84x84x4 per step), or it ships each new frame once (84x84x1 per step, plus
each env's 3 frames before the fragment) and the receiver rebuilds the stacks.
Each way is timed from encode through a real loopback TCP PUSH/PULL to the
[32, 8, 84, 84, 4] stacks, the rebuild included (its best case: channels-first
copies, no episode ends inside the fragment).

Each side's time is the fastest of `--repeats` interleaved repeats (each the
mean over a loop of about 0.2 s, garbage collection included).

    python tools/bench/wire.py [--repeats 7] [--frames]
"""

from __future__ import annotations

import argparse
import time

import msgpack
import numpy as np
import zmq

from verl_zmq import wire
from verl_zmq.wire.samples import as_sampler_ships, cartpole_fragment, params_arrays


def per_call(fn, budget_s: float = 0.2) -> float:
    n = 1
    while True:  # calibrate a loop that lasts about budget_s
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        dt = time.perf_counter() - t0
        if dt > budget_s / 4:
            break
        n *= 4
    loops = max(1, int(n * budget_s / dt))
    t0 = time.perf_counter()
    for _ in range(loops):
        fn()
    return (time.perf_counter() - t0) / loops


def ours(msg):
    def run():
        frames = wire.encode(msg)
        wire.decode(frames)
    return run


def floor(arrays):
    def run():
        packed = msgpack.packb({k: v.tobytes() for k, v in arrays.items()}, use_bin_type=True)
        msgpack.unpackb(packed, raw=False)
    return run


def frames_case(T: int = 32, E: int = 8, k: int = 4, side: int = 84):
    """(ship stacks, ship new frames): each a callable doing one fragment's trip."""
    rng = np.random.default_rng(0)
    history = rng.integers(0, 256, (T + k - 1, E, side, side), dtype=np.uint8)
    # what the sampler holds: at step t the last k frames, channels last
    stacks = np.ascontiguousarray(np.stack([history[t:t + k] for t in range(T)]
                                           ).transpose(0, 2, 3, 4, 1))
    ctx = zmq.Context()
    push, pull = ctx.socket(zmq.PUSH), ctx.socket(zmq.PULL)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    push.connect(f"tcp://127.0.0.1:{port}")

    def trip(arrays):
        push.send_multipart(wire.encode(wire.Fragment(version=1, arrays=arrays)), copy=False)
        return wire.decode(pull.recv_multipart(copy=False)).arrays

    def ship_stacks():
        got = trip({"obs": stacks})
        return np.asarray(got["obs"])

    def ship_frames():
        got = trip({"frames": history[k - 1:], "before": history[:k - 1]})
        h = np.concatenate([np.asarray(got["before"]), np.asarray(got["frames"])])
        # rebuilt channels first, k contiguous copies ([T, E, k, H, W], the layout
        # a convolution takes), then seen channels last without another copy
        out = np.empty((T, E, k, side, side), np.uint8)
        for j in range(k):
            out[:, :, j] = h[j:j + T]
        return out.transpose(0, 1, 3, 4, 2)

    assert np.array_equal(ship_stacks(), stacks) and np.array_equal(ship_frames(), stacks)
    return ship_stacks, ship_frames, stacks.nbytes, history.nbytes, (ctx, push, pull)


def bench_frames(repeats: int) -> None:
    ship_stacks, ship_frames, b_stacks, b_frames, socks = frames_case()
    a, b = [], []
    for _ in range(repeats):
        a.append(per_call(ship_stacks, 1.0))
        b.append(per_call(ship_frames, 1.0))
    ms, mf = min(a), min(b)
    print("\n32 x 8 Atari frames stacked 4 deep, through loopback TCP to a decoded array:")
    print(f"{'ship':<34}{'bytes':>12}{'ms':>8}")
    print(f"{'stacks (84x84x4 a step)':<34}{b_stacks:>12,}{ms * 1e3:>8.2f}")
    print(f"{'new frames, stacks rebuilt':<34}{b_frames:>12,}{mf * 1e3:>8.2f}")
    print(f"ratio new frames / stacks: {mf / ms:.2f}")
    ctx, push, pull = socks
    push.close(0)
    pull.close(0)
    ctx.term()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--frames", action="store_true", help="also where frame stacks are built")
    args = ap.parse_args()
    frag = cartpole_fragment(128, 8)
    params = params_arrays(1 << 20)
    cases = [("fragment, as shipped", wire.Fragment(version=3, arrays=as_sampler_ships(frag)),
              frag),
             ("fragment, 13 arrays", wire.Fragment(version=3, arrays=frag), frag),
             ("params 1 MB", wire.Params(version=3, env_steps=1, arrays=params), params)]
    print("CartPole fragment: 128 steps x 8 envs")
    print(f"{'message':<26}{'bytes':>10}{'ours us':>10}{'floor us':>10}{'ratio':>8}")
    for name, msg, arrays in cases:
        a, b = [], []
        # interleaved repeats, each the mean of a loop (garbage collection included),
        # and the fastest repeat of each side: other work on a shared machine only
        # ever adds time, so the minimum is the best estimate of the cost (as timeit)
        for _ in range(args.repeats):
            a.append(per_call(ours(msg)))
            b.append(per_call(floor(arrays)))
        mo, mf = min(a), min(b)
        size = sum(memoryview(f).nbytes for f in wire.encode(msg))
        print(f"{name:<26}{size:>10,}{mo * 1e6:>10.1f}{mf * 1e6:>10.1f}{mo / mf:>8.2f}")
    if args.frames:
        bench_frames(args.repeats)


if __name__ == "__main__":
    main()
