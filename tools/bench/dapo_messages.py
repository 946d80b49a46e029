#!/usr/bin/env python
"""Messages and bytes per peer per update in DAPO's asynchronous default,
counted from the metrics of real jobs: for each N in --peers, the shipped
CartPole job with N peers (one sampler of 4 envs each, no evaluator) runs for
--seconds (+ 4 s a peer to start) and is stopped; then, from every peer's last
metrics event: gradient pushes (sent and dropped at a full neighbour), pull
exchanges started, and the bytes of gradient pushes, each per update, averaged
over the peers. With k = gossip.neighbor_count they should stay near
k x backward passes per update and k x 1 / update_interval whatever N.

    python tools/bench/dapo_messages.py [--peers 4 8 16] [--seconds 30]
        [--compression none sign]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: tools.*
from tools.harness import ROOT, events, launch  # noqa: E402


def measure(n: int, seconds: float, compression: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        launch(ROOT / "configs/cartpole_dapo.toml", run,
               [f"launch.peers={n}", "launch.evaluators=0", "sampling.num_envs_per_worker=4",
                "gossip.share_batch=false", f'gossip.compression="{compression}"',
                "logging.interval_s=1", "training.total_timesteps=100000000"], timeout=seconds)
        rows = []
        for i in range(n):
            m = [e for e in events(run / "logs" / f"peer-{i}.jsonl") if e.get("event") == "metrics"]
            rounds = sum(int(e["exchanges"]) for e in events(run / "logs" / f"peer-{i}.jsonl")
                         if e.get("event") == "gossip_round")
            if m and m[-1].get("peer/updates"):
                rows.append((m[-1], rounds))
    if not rows:
        raise SystemExit(f"N = {n}: no peer updated within {seconds:.0f} s")
    per = {"pushes": [], "pulls": [], "bytes": [], "updates": [], "mixed": []}
    for m, rounds in rows:
        u = m["peer/updates"]
        per["pushes"].append((m["gossip/grad_pushes"] + m["gossip/grad_push_dropped"]) / u)
        per["pulls"].append(rounds / u)
        per["bytes"].append(m["gossip/grad_bytes_per_step"])  # every neighbour's push
        per["updates"].append(u)
        per["mixed"].append(m["gossip/grad_mixed_per_step"])
    return {k: sum(v) / len(v) for k, v in per.items()} | {"peers_reporting": len(rows)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peers", type=int, nargs="+", default=[4, 8, 16])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--compression", nargs="+", default=["none"])
    args = ap.parse_args()
    print("| peers | compression | peers reporting | updates a peer | gradient pushes "
          "per update | pull exchanges per update | gradient bytes per backward pass | "
          "neighbours' gradients mixed per step |")
    print("|---|---|---|---|---|---|---|---|")
    for c in args.compression:
        for n in args.peers:
            r = measure(n, args.seconds + 4.0 * n, c)
            print(f"| {n} | {c} | {r['peers_reporting']} | {r['updates']:.0f} | "
                  f"{r['pushes']:.1f} | {r['pulls']:.2f} | {r['bytes']:,.0f} | "
                  f"{r['mixed']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
