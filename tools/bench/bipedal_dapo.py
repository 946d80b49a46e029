#!/usr/bin/env python
"""BipedalWalker-v3 with the shipped DAPO job (`configs/bipedalwalker_dapo.toml`,
4 peers): a run to `--budget` group env steps (or until an evaluation reaches
`--stop-at`), then from the evaluator's log the first evaluation at or above 250 and at or above
300 (group env steps and seconds from the first env step), the best, and the
curve as a PNG (`verl plot`, the `plot` extra).

rl-baselines3-zoo's PPO gives 213 +- 129 at 5M env steps; 300 is "solved".

    python tools/bench/bipedal_dapo.py [--seed 0] [--budget 5000000] [--stop-at 300]
        [--out bipedalwalker_dapo.png] [--run-dir runs/bipedal] [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: tools.*
from tools.harness import ROOT, events, launch, sampling_start  # noqa: E402

JOB = "configs/bipedalwalker_dapo.toml"
MARKS = (250.0, 300.0)


def summary(run: Path) -> dict:
    """The first evaluation at or above each mark, and the best, from a run's log."""
    evs = [e for e in events(run / "logs" / "evaluator-0.jsonl") if e.get("event") == "evaluated"]
    first = sampling_start(run)
    latest: dict[str, int] = {}
    out: dict = {"evaluations": len(evs), "best": None}
    for e in evs:
        latest[e["member"]] = int(e["env_steps"])
        r = float(e["eval/return_mean"])
        out["best"] = r if out["best"] is None else max(out["best"], r)
        for mark in MARKS:
            if r >= mark and f"at_{mark:g}" not in out:
                out[f"at_{mark:g}"] = {"return": round(r, 1), "group_env_steps": sum(
                    latest.values()), "s": round(e["ts"] - first, 1) if first else None}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget", type=int, default=5_000_000)
    ap.add_argument("--stop-at", type=float, default=None,
                    help="stop once an evaluation reaches this (default: run the budget)")
    ap.add_argument("--run-dir", default="runs/bipedal_bench")
    ap.add_argument("--out", default="bipedalwalker_dapo.png")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                    help="overrides for the DAPO job")
    args = ap.parse_args()
    run = Path(args.run_dir)
    if run.exists():
        raise SystemExit(f"{run} exists: name another --run-dir")
    over = [f"experiment.seed={args.seed}", f"training.total_timesteps={args.budget}",
            *args.set]
    if args.stop_at is not None:
        over.append(f"evaluation.stop_at_return={args.stop_at}")
    t0 = time.time()
    rc, _ = launch(ROOT / JOB, run, over, timeout=6 * 3600)
    print({"seed": args.seed, "rc": rc, "wall_s": round(time.time() - t0), **summary(run)},
          flush=True)
    subprocess.run([sys.executable, "-m", "verl_zmq.cli", "plot", str(run), "-o", args.out],
                   check=False)


if __name__ == "__main__":
    main()
