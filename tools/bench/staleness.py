#!/usr/bin/env python
"""What stale fragments do to learning, and whether the decoupled objective
mends it: a job at a policy lag of 0 and of `--lag`, each with the standard
objective (the ratio to the sampler's policy, clipped) and the decoupled one
(`algorithm.params.decoupled_loss`), over seeds; env steps and updates until an
evaluation reaches `--target`.

- lag 0: `training.max_policy_lag = 0` with `sampling.mode = "sync"` (each
  sampler waits for new params after every fragment: nothing is stale, nothing
  is dropped);
- lag N: `training.max_policy_lag = N` with `sampling.lead_updates = N` (samplers
  run up to N updates ahead; fragments up to N versions old are trained on).

Each row says the measured mean policy lag of what was trained on.

    python tools/bench/staleness.py --job configs/reverse_grpo.toml --target 0.9 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: tools.*
from tools.harness import ROOT, events, launch, time_to_return  # noqa: E402


def arm_sets(lag: int, decoupled: bool) -> list[str]:
    pacing = ['sampling.mode="sync"'] if lag == 0 else [f"sampling.lead_updates={lag}"]
    return [f"training.max_policy_lag={lag}", *pacing,
            f"algorithm.params.decoupled_loss={'true' if decoupled else 'false'}"]


def run_arm(job: Path, run: Path, seed: int, lag: int, decoupled: bool, target: float,
            budget: int, timeout: float) -> dict:
    rc, wall = launch(job, run, [f"experiment.seed={seed}", f"evaluation.stop_at_return={target}",
                                 f"training.total_timesteps={budget}",
                                 *arm_sets(lag, decoupled)], timeout=timeout)
    _, steps = time_to_return(run, target)
    last = [e for e in events(run / "logs" / "learner-0.jsonl") if e.get("event") == "metrics"]
    lags = [e["learner/policy_lag_mean"] for e in last if "learner/policy_lag_mean" in e]
    return {"seed": seed, "lag": lag, "decoupled": decoupled, "rc": rc,
            "env_steps_to_target": steps, "wall_s": round(wall, 1),
            "updates": last[-1].get("learner/updates") if last else None,
            "policy_lag_mean": round(statistics.fmean(lags), 2) if lags else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--job", default=str(ROOT / "configs" / "reverse_grpo.toml"))
    ap.add_argument("--target", type=float, default=0.9)
    ap.add_argument("--lag", type=int, default=4)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--budget", type=int, default=2_000_000, help="env steps per run at most")
    ap.add_argument("--timeout", type=float, default=1800)
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in a.seeds:
            for lag in (0, a.lag):
                for decoupled in (False, True):
                    run = Path(tmp) / f"s{seed}-lag{lag}-{'dec' if decoupled else 'std'}"
                    row = run_arm(Path(a.job), run, seed, lag, decoupled, a.target,
                                  a.budget, a.timeout)
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    print(f"\nenv steps to {a.target} ({Path(a.job).name}; none: not within the budget)\n")
    print("| lag | objective | " + " | ".join(f"seed {s}" for s in a.seeds)
          + " | mean | policy lag trained on |")
    print("|---|---|" + "---|" * (len(a.seeds) + 2))
    for lag in (0, a.lag):
        for decoupled in (False, True):
            mine = [r for r in rows if r["lag"] == lag and r["decoupled"] == decoupled]
            got = [r["env_steps_to_target"] for r in mine]
            done = [g for g in got if g is not None]
            mean = f"{statistics.fmean(done):,.0f}" if len(done) == len(got) else "-"
            lags = [r["policy_lag_mean"] for r in mine if r["policy_lag_mean"] is not None]
            print(f"| {lag} | {'decoupled' if decoupled else 'standard'} | "
                  + " | ".join(f"{g:,}" if g is not None else "none" for g in got)
                  + f" | {mean} | {statistics.fmean(lags) if lags else 0:.2f} |")


if __name__ == "__main__":
    main()
