#!/usr/bin/env python
"""Run a job for several seeds and print env steps and wall seconds to a return.

"Reaching a return": the first evaluation (n_eval_episodes deterministic
episodes on separately seeded envs) whose mean is at or above the target.
Wall seconds count from the launcher's first role start; "> budget" when the
run never reaches the target.

    python tools/seeds.py [--job configs/cartpole_ppo.toml] [--target 475] [--seeds 0 1 2]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from _jobs import ROOT, launch, launcher_start, time_to_return


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--job", default=str(ROOT / "configs" / "cartpole_ppo.toml"))
    ap.add_argument("--target", type=float, default=475.0)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--set", dest="extra", action="append", default=[])
    ap.add_argument("--keep", action="store_true", help="keep the run folders (printed)")
    args = ap.parse_args()
    print(f"{'seed':>4}{'steps to target':>17}{'wall s to target':>18}{'total wall s':>14}"
          f"{'best eval':>11}{'exit':>6}")
    for seed in args.seeds:
        tmp = Path(tempfile.mkdtemp(prefix=f"seed{seed}-"))
        run = tmp / "run"
        rc, wall = launch(args.job, run, [f"experiment.seed={seed}",
                                          f"evaluation.stop_at_return={args.target}",
                                          *args.extra], timeout=3600)
        ts, steps = time_to_return(run, args.target)
        t0 = launcher_start(run)
        sfile = run / "summary.json"
        summary = json.loads(sfile.read_text()) if sfile.exists() else {}
        hit = f"{steps:,}" if steps is not None else "> budget"
        secs = f"{ts - t0:.1f}" if ts is not None and t0 is not None else "> budget"
        best = summary.get("best_eval_return")
        best = f"{best:.1f}" if isinstance(best, float) else str(best)
        print(f"{seed:>4}{hit:>17}{secs:>18}{wall:>14.1f}{best:>11}"
              f"{rc:>6}" + (f"  {run}" if args.keep else ""), flush=True)


if __name__ == "__main__":
    main()
