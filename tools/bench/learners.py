#!/usr/bin/env python
"""Data-parallel learners against one learner, side by side in one invocation.

Equivalence (CartPole PPO, `configs/cartpole_ppo.toml`, same seeds): one
learner with batch 256 against two learners (`training.num_learners = 2`) with
128 each, whose every minibatch's gradient is all-reduced. Printed per run: env
steps and wall seconds until the first evaluation at or above the target; then
per arm the mean with a bootstrap 90% interval, and the ratio of means.

Throughput (`--throughput`): a learner-bound run (`n_epochs = 40`, no
evaluator, a fixed budget): updates per second of the learner (rank 0) from its
first update to the end of training, 2 learners over 1.

    python tools/bench/learners.py [--seeds 0 1 2 3 4] [--throughput]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: tools.*
from tools.harness import ROOT, events, launch  # noqa: E402

JOB = ROOT / "configs" / "cartpole_ppo.toml"
BUDGET = 200_000
ARMS = {"1x256": ["training.num_learners=1"], "2x128": ["training.num_learners=2"]}


def to_target(arm: str, seed: int, target: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        t0 = time.time()
        launch(JOB, run, [*ARMS[arm], f"experiment.seed={seed}",
                          f"training.total_timesteps={BUDGET}", "evaluation.interval_steps=5000",
                          f"evaluation.stop_at_return={target}"], timeout=1800)
        evs = [e for e in events(run / "logs" / "evaluator-0.jsonl")
               if e.get("event") == "evaluated"]
    hit = next((e for e in evs if e["eval/return_mean"] >= target), None)
    return {"steps": int(hit["env_steps"]) if hit else None,
            "s": hit["ts"] - t0 if hit else None}


def updates_per_s(arm: str, seed: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        launch(JOB, run, [*ARMS[arm], f"experiment.seed={seed}", "training.total_timesteps=40000",
                          "algorithm.params.n_epochs=40", "launch.evaluators=0"], timeout=1800)
        ev = events(run / "logs" / "learner-0.jsonl")
    first = next(e for e in ev if e.get("event") == "first_update")
    done = next(e for e in ev if e.get("event") == "training_finished")
    return done["updates"] / max(1e-9, done["ts"] - first["ts"])


def boot(xs: list[float], rng: random.Random, n: int = 2000) -> tuple[float, float]:
    means = sorted(sum(rng.choice(xs) for _ in xs) / len(xs) for _ in range(n))
    return means[int(0.05 * n)], means[int(0.95 * n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--target", type=float, default=475.0)
    ap.add_argument("--throughput", action="store_true", help="also updates per second")
    args = ap.parse_args()
    rows: dict[str, list[dict]] = {a: [] for a in ARMS}
    print(f"{'arm':<7}{'seed':>5}{'env steps':>11}{'seconds':>9}")
    for seed in args.seeds:
        for arm in ARMS:  # interleaved: a drifting machine load hits both alike
            r = to_target(arm, seed, args.target)
            rows[arm].append(r)
            steps = f"{r['steps']:,}" if r["steps"] else "> budget"
            secs = f"{r['s']:.1f}" if r["s"] else "-"
            print(f"{arm:<7}{seed:>5}{steps:>11}{secs:>9}", flush=True)
    rng = random.Random(0)
    means = {}
    for arm, rs in rows.items():
        xs = [r["steps"] for r in rs]
        if any(x is None for x in xs):
            print(f"  {arm}: a run did not reach {args.target:g} within {BUDGET:,} env steps")
            continue
        means[arm] = sum(xs) / len(xs)
        lo, hi = boot(xs, rng)
        print(f"  {arm}: mean env steps to {args.target:g} {means[arm]:,.0f} "
              f"[{lo:,.0f}, {hi:,.0f}]")
    if len(means) == 2:
        print(f"ratio of means, 2x128 / 1x256: {means['2x128'] / means['1x256']:.2f}")
    if args.throughput:
        ups = {arm: updates_per_s(arm, args.seeds[0]) for arm in ARMS}
        print(f"learner-bound (n_epochs 40): updates/s 1x256 {ups['1x256']:.2f}, "
              f"2x128 {ups['2x128']:.2f}, ratio {ups['2x128'] / ups['1x256']:.2f}")


if __name__ == "__main__":
    main()
