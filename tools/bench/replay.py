#!/usr/bin/env python
"""Replay speed: insert a 1,024-transition fragment, sample 256 with importance
weights, update 256 priorities, at capacities 100k and 1M; ours (vectorised
SumTree, preallocated ring) against a plain Python/numpy reference (the
textbook per-item SumTree) timed in the same run. Prints microseconds and ratios.

    python tools/bench/replay.py [--capacities 100000 1000000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from verl_zmq.replay.index_samplers import PrioritizedSampler
from verl_zmq.replay.storage import RingStorage


class ReferencePER:
    """The per-item SumTree most tutorials write: a Python loop per transition."""

    def __init__(self, capacity: int, alpha: float = 0.6, beta: float = 0.4):
        self.cap, self.alpha, self.beta = capacity, alpha, beta
        self.tree = np.zeros(2 * capacity)
        self.data = [None] * capacity
        self.cursor, self.size, self.max_p = 0, 0, 1.0

    def _set(self, i: int, p: float) -> None:
        j = i + self.cap
        delta = p - self.tree[j]
        while j >= 1:
            self.tree[j] += delta
            j //= 2

    def add(self, transitions: list) -> None:
        for t in transitions:
            self.data[self.cursor] = t
            self._set(self.cursor, self.max_p ** self.alpha)
            self.cursor = (self.cursor + 1) % self.cap
            self.size = min(self.size + 1, self.cap)

    def _find(self, s: float) -> int:
        j = 1
        while j < self.cap:
            if s < self.tree[2 * j]:
                j = 2 * j
            else:
                s -= self.tree[2 * j]
                j = 2 * j + 1
        return min(j - self.cap, self.size - 1)

    def sample(self, n: int):
        total = self.tree[1]
        seg = total / n
        idx = [self._find(seg * (k + np.random.random())) for k in range(n)]
        probs = np.array([self.tree[i + self.cap] for i in idx]) / total
        w = (self.size * probs) ** -self.beta
        return idx, [self.data[i] for i in idx], w / w.max()

    def update(self, idx, priorities) -> None:
        for i, p in zip(idx, priorities):
            self.max_p = max(self.max_p, p)
            self._set(i, p ** self.alpha)


def timed(fn, repeats: int = 20) -> float:
    best = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best.append(time.perf_counter() - t0)
    return float(np.median(best)) * 1e6


def fragment(n: int, rng) -> dict[str, np.ndarray]:
    return {"obs": rng.standard_normal((n, 4), dtype=np.float32),
            "next_obs": rng.standard_normal((n, 4), dtype=np.float32),
            "action": rng.integers(0, 2, n), "reward": np.ones(n, np.float32),
            "discount": np.full(n, 0.99, np.float32)}


def bench_capacity(cap: int, rng) -> None:
    ours_store, ours = RingStorage(cap), PrioritizedSampler(cap)
    ref = ReferencePER(cap)
    frag = fragment(1024, rng)
    rows = [list(zip(*frag.values()))]
    while ours_store.size < cap:  # fill both to capacity first
        ours.on_insert(ours_store.add(frag))
    ref.add(rows[0] * (cap // 1024 + 1))

    def ours_insert():
        ours.on_insert(ours_store.add(frag))

    def ours_sample():
        idx, w = ours.sample(256, ours_store.size, 0.3)
        return ours_store.get(idx), w

    prio = rng.random(256) + 0.1
    idx_u = rng.integers(0, cap, 256)
    results = [
        ("insert 1,024", timed(ours_insert), timed(lambda: ref.add(rows[0]), 5)),
        ("sample 256 + weights", timed(ours_sample), timed(lambda: ref.sample(256), 5)),
        ("update 256", timed(lambda: ours.update(idx_u, prio)),
         timed(lambda: ref.update(idx_u, prio), 5)),
    ]
    for name, a, b in results:
        print(f"{cap:>10,} {name:<22}{a:>10.1f}{b:>14.1f}{b / a:>8.1f}")
    su = results[1][1] + results[2][1], results[1][2] + results[2][2]
    print(f"{cap:>10,} {'sample + update':<22}{su[0]:>10.1f}{su[1]:>14.1f}"
          f"{su[1] / su[0]:>8.1f}", flush=True)




def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--capacities", type=int, nargs="+", default=[100_000, 1_000_000])
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    print(f"{'capacity':>10} {'operation':<22}{'ours us':>10}{'reference us':>14}{'ratio':>8}")
    for cap in args.capacities:
        bench_capacity(cap, rng)


if __name__ == "__main__":
    main()
