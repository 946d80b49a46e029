#!/usr/bin/env python
"""Gossip at scale: N simulated peers (16 ... 1024) run the real neighbour
selection (`verl_zmq.learning.gossip.core.select_round`, and `round_mix.round_graph`, the graph
of the default gradient rounds and of exact parameter rounds)
and mixing (`gossip.mix`, `gossip.mixing_weights`) under pure averaging: no
learning, every peer starts from random parameters, each round every peer pulls
from its k neighbours and mixes theta <- (1 - a) theta + a * mean(theta_neighbours)
(exact: theta <- mean(theta, theta of its in-neighbours), equal weights). Printed per round
(every round at first, then at powers of two): exchanges started and the spread
of parameters (Frobenius distance to their mean) relative to the initial
spread; then rounds to a relative spread below 1e-3, or "not within the cap".

    python tools/sim/gossip.py [--sizes 16 64 256 1024] [--cap 5000] [--k 2] [--rate 0.5]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from verl_zmq.learning.gossip import core as gossip
from verl_zmq.learning.gossip.round_mix import COMPLETE_MAX, round_graph

TOL = 1e-3


def spread(theta: np.ndarray) -> float:
    return float(np.linalg.norm(theta - theta.mean(axis=0)))


def exact_round(n: int, r: int) -> np.ndarray:
    """In-neighbours of every peer in round `r` of gradient and exact rounds, from
    the peers' own code (`round_graph`): complete up to COMPLETE_MAX peers, else
    one-peer exponential."""
    ids = [f"peer-{i:05d}" for i in range(n)]
    rows = []
    for me in ids:
        _, into = round_graph(me, [i for i in ids if i != me], r)
        rows.append([int(i.split("-")[1]) for i in into])
    return np.array(rows)


def simulate(strategy: str, topology: str, n: int, k: int, rate: float, cap: int,
             rng: np.random.Generator, verbose: bool) -> tuple[int | None, float, list]:
    theta = rng.standard_normal((n, 8))
    s0 = spread(theta)
    rows = []
    for r in range(cap):
        if strategy == "exact":  # average with every in-neighbour, equal weights
            nb = exact_round(n, r + 1)
            theta = (theta + theta[nb].sum(axis=1)) / (1 + nb.shape[1])
            rel = spread(theta) / s0
            if verbose and (r < 4 or (r + 1) & r == 0) or rel < TOL:
                rows.append((r + 1, nb.size, rel))
            if rel < TOL:
                return r + 1, rel, rows
            continue
        nb = gossip.select_round(strategy, n, k, r, rng, topology=topology)
        started = int((nb >= 0).sum())  # one exchange per chosen live neighbour
        w = gossip.mixing_weights("uniform", [0.0] * nb.shape[1])
        theta = gossip.mix(theta, theta[nb], np.broadcast_to(w, nb.shape), rate)
        rel = spread(theta) / s0
        if verbose and (r < 4 or (r + 1) & r == 0):
            rows.append((r + 1, started, rel))
        if rel < TOL:
            rows.append((r + 1, started, rel))
            return r + 1, rel, rows
    return None, rel, rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[16, 64, 256, 1024])
    ap.add_argument("--cap", type=int, default=5000, help="rounds at most")
    ap.add_argument("--k", type=int, default=2, help="neighbours per round")
    ap.add_argument("--rate", type=float, default=0.5, help="mixing rate a")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quiet", action="store_true", help="only the summary")
    args = ap.parse_args()
    kinds = [("exact", "-"), ("topology", "ring"), ("topology", "exponential"),
             ("random", "-")]
    summary = []
    for strategy, topology in kinds:
        name = topology if strategy == "topology" else strategy
        for n in args.sizes:
            per_round = n * (n - 1 if n <= COMPLETE_MAX else 1) if strategy == "exact" \
                else n * min(args.k, n - 1)
            t0 = time.perf_counter()
            rng = np.random.default_rng(args.seed)
            rounds, rel, rows = simulate(strategy, topology, n, args.k, args.rate, args.cap,
                                         rng, not args.quiet)
            dt = time.perf_counter() - t0
            if not args.quiet:
                print(f"\n{name}, N={n}, k={args.k}, a={args.rate}")
                print(f"{'round':>7}{'exchanges':>11}{'per peer':>10}{'rel. spread':>13}")
                for r, started, s in rows:
                    print(f"{r:>7}{started:>11}{started / n:>10.2f}{s:>13.3e}")
            summary.append((name, n, rounds, rel, per_round, dt))
    print(f"\nrounds to a relative spread below {TOL:g} (cap {args.cap}); messages per round "
          f"= N x k, linear in N (exact: one push per peer beyond {COMPLETE_MAX} peers)")
    print(f"{'graph':<12}{'N':>6}{'exchanges/round':>17}{'rounds':>24}{'wall s':>8}")
    for name, n, rounds, rel, per_round, dt in summary:
        got = str(rounds) if rounds is not None else f"not within the cap ({rel:.1e})"
        print(f"{name:<12}{n:>6}{per_round:>17}{got:>32}{dt:>8.1f}", flush=True)


if __name__ == "__main__":
    main()
