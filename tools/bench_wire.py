#!/usr/bin/env python
"""Wire codec speed: encode+decode of a 128-step x 8-env CartPole fragment and of
a 1 MB params message, against the floor measured in the same run (plain
msgpack.packb/unpackb of the same arrays as bytes). Prints times and ratios.

    python tools/bench_wire.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import time

import msgpack

from verl_zmq import wire
from verl_zmq.wire_samples import cartpole_fragment, params_arrays


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    frag = cartpole_fragment(128, 8)
    params = params_arrays(1 << 20)
    cases = [("fragment 128x8 CartPole", wire.Fragment(version=3, arrays=frag), frag),
             ("params 1 MB", wire.Params(version=3, env_steps=1, arrays=params), params)]
    print(f"{'message':<26}{'bytes':>10}{'ours us':>10}{'floor us':>10}{'ratio':>8}")
    for name, msg, arrays in cases:
        a, b = [], []
        for _ in range(args.repeats):  # interleaved, medians: shared machines are noisy
            a.append(per_call(ours(msg)))
            b.append(per_call(floor(arrays)))
        mo, mf = statistics.median(a), statistics.median(b)
        size = sum(memoryview(f).nbytes for f in wire.encode(msg))
        print(f"{name:<26}{size:>10,}{mo * 1e6:>10.1f}{mf * 1e6:>10.1f}{mo / mf:>8.2f}")


if __name__ == "__main__":
    main()
