#!/usr/bin/env python
"""Exchanges per gossip round, counted from the logs of real DAPO jobs.

For each N in --peers, runs configs/cartpole_dapo.toml in its pull mode
(`gossip.mixing = "uniform"`, each peer on its own batch) with N peers (one
sampler each, no evaluator) for --seconds (+ 8 s a peer to start), stops it,
and sums the `exchanges` of every peer's `gossip_round` event by round number.
A round is complete when every peer logged it; its total should be
N x min(k, N - 1), less exchanges to peers that were dead or not yet known.
Prints the per-round totals and the expected value.

    python tools/bench/gossip_count.py [--peers 2 4 8] [--seconds 20]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: tools.*
from tools.harness import ROOT, events, launch  # noqa: E402


def count(n: int, seconds: float) -> tuple[dict[int, list[int]], int]:
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        launch(ROOT / "configs/cartpole_dapo.toml", run,
               [f"launch.peers={n}", "launch.evaluators=0", "sampling.num_envs_per_worker=4",
                'gossip.mixing="uniform"', "gossip.share_batch=false",
                "training.total_timesteps=10000000"], timeout=seconds)
        per_round: dict[int, list[int]] = defaultdict(list)
        for i in range(n):
            for e in events(run / "logs" / f"peer-{i}.jsonl"):
                if e.get("event") == "gossip_round":
                    per_round[int(e["round"])].append(int(e["exchanges"]))
        return per_round, n * min(2, n - 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peers", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--seconds", type=float, default=20.0,
                    help="run time, plus 8 s per peer for the processes to start")
    ap.add_argument("--rounds", type=int, default=12, help="rounds to print")
    args = ap.parse_args()
    for n in args.peers:
        per_round, expected = count(n, args.seconds + 8.0 * n)
        complete = {r: v for r, v in per_round.items() if len(v) == n}
        print(f"\nN = {n} peers, k = 2: expected N x min(k, N-1) = {expected} exchanges a round")
        print(f"{'round':>6}{'peers':>7}{'exchanges':>11}{'= N k':>7}")
        for r in sorted(complete)[: args.rounds]:
            total = sum(complete[r])
            same = "yes" if total == expected else "no"
            print(f"{r:>6}{len(complete[r]):>7}{total:>11}{same:>7}")
        ok = sum(sum(v) == expected for v in complete.values())
        print(f"complete rounds: {len(complete)}, with exactly N k exchanges: {ok}", flush=True)


if __name__ == "__main__":
    main()
