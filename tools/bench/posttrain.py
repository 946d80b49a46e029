#!/usr/bin/env python
"""Post-training at toy scale, measured: three arms, each a whole job launched
with verl-launch on this machine, one seed after the other.

- `scratch`: configs/reverse_grpo.toml from random initial weights; seconds from
  the launcher's start until greedy exact-match accuracy on held-out prompts
  reaches the target (0.9), env steps then, and the best accuracy.
- `warm`: `verl sft` on demonstrations until accuracy first reaches 10% (it stops
  there: 10-50%), then the same GRPO job starting from that checkpoint (initial
  and reference policy) until 0.95; accuracy before and after, the KL to the
  reference (nats per token) at its largest and last.
- `digitsum`: configs/digitsum_grpo.toml (no demonstrations exist): the initial
  policy's mean reward (sampled responses, and greedy) against GRPO's greedy
  evaluations at the end of its budget.

    python tools/bench/posttrain.py --seeds 0 1 2
    python tools/bench/posttrain.py --arms scratch --seeds 0 --set algorithm.params.kl_coef=0
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.harness import events, launch, launcher_start, time_to_return  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
REVERSE = ROOT / "configs" / "reverse_grpo.toml"
DIGITSUM = ROOT / "configs" / "digitsum_grpo.toml"


def _evals(run: Path) -> list[tuple[int, float]]:
    s = json.loads((run / "summary.json").read_text())
    return [(e["env_steps"], e["return_mean"]) for e in s["evaluations"]]


def _kl(run: Path) -> list[float]:
    out = []
    for log in sorted((run / "logs").glob("learner*.jsonl")):
        out += [e["charts/kl_ref"] for e in events(log)
                if e.get("event") == "metrics" and "charts/kl_ref" in e]
    return out


def scratch(seed: int, tmp: Path, sets: list[str], target: float) -> dict:
    run = tmp / f"scratch-{seed}"
    rc, wall = launch(REVERSE, run, [f"experiment.seed={seed}",
                                     f"evaluation.stop_at_return={target}", *sets])
    ts, steps = time_to_return(run, target)
    t0 = launcher_start(run)
    ev = _evals(run)
    return {"arm": "scratch", "seed": seed, "rc": rc, "wall_s": round(wall, 1),
            "to_target_s": round(ts - t0, 1) if ts and t0 else None, "steps": steps,
            "best": max((r for _, r in ev), default=None)}


def warm(seed: int, tmp: Path, sets: list[str], target: float) -> dict:
    ckpt = tmp / f"sft-{seed}.pt"
    sft = subprocess.run(
        [sys.executable, "-m", "verl_zmq.cli", "sft", str(REVERSE), "--out", str(ckpt),
         "--set", f"experiment.seed={seed}", "--lr", "3e-4", "--eval-every", "5",
         "--stop-at-accuracy", "0.1", "--steps", "1000"],
        cwd=ROOT, capture_output=True, text=True, timeout=900)
    last = json.loads(sft.stdout.strip().splitlines()[-1]) if sft.returncode == 0 else {}
    run = tmp / f"warm-{seed}"
    rc, wall = launch(REVERSE, run, [f"experiment.seed={seed}", f"algorithm.init_from={ckpt}",
                                     f"evaluation.stop_at_return={target}", *sets])
    ts, steps = time_to_return(run, target)
    t0 = launcher_start(run)
    ev, kl = _evals(run), _kl(run)
    return {"arm": "warm", "seed": seed, "rc": rc, "sft_steps": last.get("steps"),
            "sft_accuracy": last.get("accuracy"), "wall_s": round(wall, 1),
            "to_target_s": round(ts - t0, 1) if ts and t0 else None, "steps": steps,
            "best": max((r for _, r in ev), default=None),
            "kl_max": round(max(kl), 3) if kl else None,
            "kl_last": round(kl[-1], 3) if kl else None}


def initial_reward(job_path: Path, seed: int, sets: list[str], n: int = 400
                   ) -> tuple[float, float]:
    """The initial policy's mean reward on held-out prompts: sampled, and greedy."""
    import torch

    from verl_zmq.algos import make_algorithm
    from verl_zmq.config import load_job
    from verl_zmq.envs.make import env_spec
    from verl_zmq.policy.evaluate import evaluate

    job = load_job(job_path, [f"experiment.seed={seed}", *sets])
    torch.manual_seed(seed)  # as every role builds the initial policy
    algo = make_algorithm(job, env_spec(job.environment))
    E = job.evaluation
    sampled = evaluate(algo, job, None, n, E.seed, deterministic=False).mean()
    greedy = evaluate(algo, job, None, n, E.seed, deterministic=True).mean()
    return float(sampled), float(greedy)


def digitsum(seed: int, tmp: Path, sets: list[str], target: float) -> dict:
    sampled, greedy = initial_reward(DIGITSUM, seed, sets)
    run = tmp / f"digitsum-{seed}"
    rc, wall = launch(DIGITSUM, run, [f"experiment.seed={seed}", *sets])
    ev = _evals(run)
    return {"arm": "digitsum", "seed": seed, "rc": rc, "wall_s": round(wall, 1),
            "initial_sampled": round(sampled, 3), "initial_greedy": round(greedy, 3),
            "final": ev[-1][1] if ev else None,
            "best": max((r for _, r in ev), default=None)}


ARMS = {"scratch": (scratch, 0.9), "warm": (warm, 0.95), "digitsum": (digitsum, 0.0)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS))
    ap.add_argument("--set", dest="sets", action="append", default=[],
                    help="a job override for every arm, section.key=value")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="posttrain-") as d:
        for arm in a.arms:
            fn, target = ARMS[arm]
            for seed in a.seeds:
                row = fn(seed, Path(d), a.sets, target)
                print(json.dumps(row), flush=True)
                rows.append(row)
    for arm in a.arms:
        got = [r for r in rows if r["arm"] == arm]
        if arm == "digitsum":
            print(f"digitsum: initial mean reward sampled "
                  f"{np.mean([r['initial_sampled'] for r in got]):.3f}, greedy "
                  f"{np.mean([r['initial_greedy'] for r in got]):.3f}; after GRPO final "
                  f"{np.mean([r['final'] or 0 for r in got]):.3f}, best "
                  f"{np.mean([r['best'] or 0 for r in got]):.3f} (mean of {len(got)} seeds)")
            continue
        times = [r["to_target_s"] for r in got]
        reached = [t for t in times if t is not None]
        print(f"{arm}: target {ARMS[arm][1]} reached by {len(reached)}/{len(got)} seeds; "
              f"seconds from launch {times}; mean {np.mean(reached):.1f} s"
              if reached else f"{arm}: target {ARMS[arm][1]} reached by no seed")


if __name__ == "__main__":
    main()
