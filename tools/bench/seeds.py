#!/usr/bin/env python
"""Run a job for several seeds and print env steps and wall seconds to a return.

"Reaching a return": the first evaluation (n_eval_episodes deterministic
episodes on separately seeded envs) whose mean is at or above the target.
Wall seconds count from the launcher's first role start; "> budget" when the
run never reaches the target. Also per run: the share of fragments the learners
dropped for lag, the share of their time the samplers waited for params, and the
largest mean Q of a sampled batch (DQN: above 1/(1-gamma) it overestimates).

    python tools/bench/seeds.py [--job configs/cartpole_ppo.toml] [--target 475] [--seeds 0 1 2]

`--against KEY=VALUE` (repeatable) runs the same job with those overrides too,
seed by seed, both for the whole budget (no stop at the target), and prints
each run's final evaluation and the ratio of the variant's to the job's: what
`algorithm.policy.recurrent=""` is worth on a task that needs memory, say.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: tools.*
from tools.harness import ROOT, events, launch, launcher_start, time_to_return  # noqa: E402


def pipeline(run: Path) -> tuple[float | None, float | None]:
    """(% of received fragments dropped for lag, % of sampler time waiting for params),
    from the roles' final metrics."""
    got = dropped = 0
    for p in list((run / "logs").glob("learner-*.jsonl")) + list(
            (run / "logs").glob("peer-*.jsonl")):
        final = [e for e in events(p) if e.get("event") == "metrics"][-1:]
        for e in final:
            role = p.stem.split("-")[0]
            got += sum((e.get(f"{role}/fragments_from") or {}).values())
            dropped += e.get(f"{role}/fragments_dropped", 0)
    waits = []
    for p in (run / "logs").glob("sampler-*.jsonl"):
        ev = events(p)
        start = [e["ts"] for e in ev if e.get("event") == "sampling_started"]
        final = [e for e in ev if e.get("event") == "metrics"][-1:]
        if start and final:
            waits.append(final[0].get("sampler/param_wait_s", 0.0)
                         / max(final[0]["ts"] - start[0], 1e-9))
    return (100 * dropped / got if got else None,
            100 * sum(waits) / len(waits) if waits else None)


def max_q(run: Path) -> float | None:
    """The largest mean Q of a sampled batch the learners logged (DQN), if any."""
    qs = [e["losses/q_mean"] for p in (run / "logs").glob("learner-*.jsonl")
          for e in events(p) if "losses/q_mean" in e]
    return max(qs) if qs else None


def final_eval(run: Path) -> float | None:
    """The run's last evaluation (summary.json's final_eval_return)."""
    f = run / "summary.json"
    value = json.loads(f.read_text()).get("final_eval_return") if f.exists() else None
    return float(value) if isinstance(value, int | float) else None


def _num(x: float | None) -> str:
    return f"{x:.1f}" if x is not None else "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--job", default=str(ROOT / "configs" / "cartpole_ppo.toml"))
    ap.add_argument("--target", type=float, default=475.0)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--set", dest="extra", action="append", default=[])
    ap.add_argument("--keep", action="store_true", help="keep the run folders (printed)")
    ap.add_argument("--against", action="append", default=[], metavar="KEY=VALUE",
                    help="also run the job with these overrides; compare final evaluations")
    args = ap.parse_args()
    print(f"{'seed':>4}{'steps to target':>17}{'wall s to target':>18}{'total wall s':>14}"
          f"{'best eval':>11}{'dropped %':>11}{'param wait %':>14}{'max Q':>8}{'exit':>6}"
          + (f"{'final eval':>12}{'variant final':>15}{'ratio':>7}" if args.against else ""))
    reached = 0
    for seed in args.seeds:
        tmp = Path(tempfile.mkdtemp(prefix=f"seed{seed}-"))
        run = tmp / "run"
        stop = [] if args.against else [f"evaluation.stop_at_return={args.target}"]
        rc, wall = launch(args.job, run, [f"experiment.seed={seed}", *stop, *args.extra],
                          timeout=3600)
        compared = ""
        if args.against:
            other = tmp / "variant"
            launch(args.job, other, [f"experiment.seed={seed}", *args.extra, *args.against],
                   timeout=3600)
            mine, theirs = final_eval(run), final_eval(other)
            ratio = f"{theirs / mine:.2f}" if mine and theirs is not None else "-"
            compared = f"{_num(mine):>12}{_num(theirs):>15}{ratio:>7}"
        ts, steps = time_to_return(run, args.target)
        t0 = launcher_start(run)
        sfile = run / "summary.json"
        summary = json.loads(sfile.read_text()) if sfile.exists() else {}
        hit = f"{steps:,}" if steps is not None else "> budget"
        secs = f"{ts - t0:.1f}" if ts is not None and t0 is not None else "> budget"
        best = summary.get("best_eval_return")
        best = f"{best:.1f}" if isinstance(best, float) else str(best)
        drop, wait, q = (f"{x:.1f}" if x is not None else "-"
                         for x in (*pipeline(run), max_q(run)))
        reached += steps is not None
        print(f"{seed:>4}{hit:>17}{secs:>18}{wall:>14.1f}{best:>11}{drop:>11}{wait:>14}"
              f"{q:>8}{rc:>6}{compared}" + (f"  {tmp}" if args.keep else ""), flush=True)
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"reached {args.target:g}: {reached} of {len(args.seeds)} seeds")


if __name__ == "__main__":
    main()
