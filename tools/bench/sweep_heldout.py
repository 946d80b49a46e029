#!/usr/bin/env python
"""A sweep's best job against the shipped job on seeds the sweep never ran (its
trials all ran the job's own seed): env steps until the first evaluation at or
above the target, each job launched whole, one after the other, same seeds.

    python tools/bench/sweep_heldout.py runs/sweeps/cartpole_ppo/best.toml \
        --shipped configs/cartpole_ppo.toml --seeds 101 102 103 --target 475
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: tools.*
from tools.harness import launch, time_to_return  # noqa: E402


def steps(job: Path, seed: int, target: float, budget: int, tmp: Path) -> int | None:
    run = tmp / f"{job.stem}-{seed}"
    rc, _ = launch(job, run, [f"experiment.seed={seed}", f"evaluation.stop_at_return={target}",
                              f"training.total_timesteps={budget}"])
    _, got = time_to_return(run, target)
    return got if rc == 0 else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("best", type=Path)
    ap.add_argument("--shipped", type=Path, default=Path("configs/cartpole_ppo.toml"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[101, 102, 103])
    ap.add_argument("--target", type=float, default=475.0)
    ap.add_argument("--budget", type=int, default=100_000,
                    help="env steps each run may take (a run that never reaches the "
                         "target counts at this budget)")
    a = ap.parse_args()
    rows: dict[str, list[int | None]] = {"best": [], "shipped": []}
    with tempfile.TemporaryDirectory() as t:
        for seed in a.seeds:
            for name, job in (("best", a.best), ("shipped", a.shipped)):
                rows[name].append(steps(job, seed, a.target, a.budget, Path(t)))
                print(f"seed {seed} {name}: {rows[name][-1]}", flush=True)
    print(f"\nenv steps to {a.target:g} on held-out seeds {a.seeds} (not reached: counted at "
          f"the {a.budget:,} budget)\n")
    print("| job | each | mean |\n|---|---|---|")
    means = {}
    for name, got in rows.items():
        vals = [g if g is not None else a.budget for g in got]
        means[name] = sum(vals) / len(vals)
        print(f"| {name} ({a.best if name == 'best' else a.shipped}) | "
              f"{', '.join('not reached' if g is None else f'{g:,}' for g in got)} | "
              f"{means[name]:,.0f} |")
    verdict = "fewer" if means["best"] < means["shipped"] else "not fewer"
    print(f"\nthe sweep's best job took {verdict} env steps than the shipped job "
          f"({means['best'] / means['shipped']:.2f}x)")


if __name__ == "__main__":
    main()
