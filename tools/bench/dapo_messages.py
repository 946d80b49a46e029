#!/usr/bin/env python
"""Messages and bytes per peer per update in DAPO's asynchronous default,
counted from the metrics of real jobs: for each N in --peers, the shipped
CartPole job with N peers (one sampler of 4 envs each, no evaluator) runs for
--seconds (+ 4 s a peer to start) and is stopped; then, from every peer's last
metrics event: pushes (batches with `gossip.share = "experience"`, the default,
or gradients with "gradients"; sent and dropped at a full neighbour), pull
exchanges started, and the bytes of pushes and of the params sent in answer to
pulls, each per update, averaged over the peers. With k = gossip.neighbor_count
they should stay near k pushes (k x backward passes for gradients) and k x 1 /
update_interval pulls per update whatever N.

    python tools/bench/dapo_messages.py [--peers 4 8 16] [--seconds 30]
        [--share experience gradients] [--compression none terngrad]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: tools.*
from tools.harness import ROOT, events, launch  # noqa: E402


def measure(n: int, seconds: float, share: str, compression: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        launch(ROOT / "configs/cartpole_dapo.toml", run,
               [f"launch.peers={n}", "launch.evaluators=0", "sampling.num_envs_per_worker=4",
                "gossip.share_batch=false", f'gossip.share="{share}"',
                f'gossip.compression="{compression}"', "logging.interval_s=1",
                "training.total_timesteps=100000000"], timeout=seconds)
        rows = []
        for i in range(n):
            m = [e for e in events(run / "logs" / f"peer-{i}.jsonl") if e.get("event") == "metrics"]
            rounds = sum(int(e["exchanges"]) for e in events(run / "logs" / f"peer-{i}.jsonl")
                         if e.get("event") == "gossip_round")
            if m and m[-1].get("peer/updates"):
                rows.append((m[-1], rounds))
    if not rows:
        raise SystemExit(f"N = {n}: no peer updated within {seconds:.0f} s")
    per: dict[str, list[float]] = {k: [] for k in ("pushes", "pulls", "push_bytes",
                                                   "param_bytes", "updates")}
    kind = "batch" if share == "experience" else "grad"
    for m, rounds in rows:
        u = m["peer/updates"]
        per["pushes"].append((m[f"gossip/{kind}_pushes"] + m[f"gossip/{kind}_push_dropped"]) / u)
        per["pulls"].append(rounds / u)
        per["push_bytes"].append(m[f"gossip/{kind}_bytes_sent"] / u)
        per["param_bytes"].append(m["gossip/param_bytes_sent"] / u)
        per["updates"].append(u)
    return {k: sum(v) / len(v) for k, v in per.items()} | {"peers_reporting": len(rows)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peers", type=int, nargs="+", default=[4, 8, 16])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--share", nargs="+", default=["experience"])
    ap.add_argument("--compression", nargs="+", default=["none"])
    args = ap.parse_args()
    print("| peers | share | compression | peers reporting | updates a peer | pushes per "
          "update | pull exchanges per update | push bytes per update | params bytes sent "
          "per update | bytes per update |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for share in args.share:
        for c in args.compression:
            for n in args.peers:
                r = measure(n, args.seconds + 4.0 * n, share, c)
                print(f"| {n} | {share} | {c} | {r['peers_reporting']} | {r['updates']:.0f} | "
                      f"{r['pushes']:.1f} | {r['pulls']:.2f} | {r['push_bytes']:,.0f} | "
                      f"{r['param_bytes']:,.0f} | {r['push_bytes'] + r['param_bytes']:,.0f} |",
                      flush=True)


if __name__ == "__main__":
    main()
