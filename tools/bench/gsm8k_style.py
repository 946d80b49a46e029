#!/usr/bin/env python
"""A GSM8K job as verl's docs write it, from a clean start, over seeds:
configs/gsm8k_hf_grpo.toml with only its paths and lengths changed.

For each seed, in a fresh folder: `verl data gsm8k` writes a train and a val
parquet in verl's columns (one-step word problems in GSM8K's style, the worked
solution in `extra_info.answer`); the reward is a Python file given by path
(a copy of configs/gsm8k_reward.py: GSM8K's strict `#### N` rule); `verl sft`
trains the whole model on the worked solutions (`--response-key
extra_info.answer`); then the GRPO job, LoRA on every linear layer, runs through
real samplers and the learner (verl-launch) for a fixed number of updates.

Prints validation exact match (greedy, the val file) of the warm start and of
the job's final evaluation, the rise, one standard deviation of the val set's
mean at the warm start (sqrt(p (1 - p) / n)), and the rise in those units.

    python tools/bench/gsm8k_style.py --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tools.harness import events, launch_warm_started  # noqa: E402

JOB = ROOT / "configs" / "gsm8k_hf_grpo.toml"
REWARD = ROOT / "configs" / "gsm8k_reward.py"
VAL = 200


def run_once(seed: int, work: Path, updates: int, sft_steps: int, timeout: float,
             extra: tuple[str, ...]) -> dict:
    """One seed (see the module); what it measured."""
    from verl_zmq.config import load_job

    work.mkdir(parents=True, exist_ok=True)
    cli = [sys.executable, "-m", "verl_zmq.cli"]
    subprocess.run([*cli, "data", "gsm8k", str(work / "data"), "--train", "4000", "--val",
                    str(VAL), "--seed", str(seed)], check=True, capture_output=True,
                   cwd=ROOT, timeout=timeout)
    shutil.copy(REWARD, work / "my_reward.py")
    sets = [f"environment.kwargs.train_files={work / 'data' / 'train.parquet'}",
            f"environment.kwargs.val_files={work / 'data' / 'val.parquet'}",
            f"environment.kwargs.reward={work / 'my_reward.py'}",
            f"experiment.seed={seed}"]
    sft_dir = work / "sft"
    cmd = [*cli, "sft", str(JOB), "--out", str(sft_dir), "--steps", str(sft_steps),
           "--lr", "3e-3", "--eval-every", str(sft_steps), "--response-key",
           "extra_info.answer", *[x for s in [*sets, "algorithm.policy.lora_rank=0"]
                                  for x in ("--set", s)]]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=timeout)
    if r.returncode:
        raise RuntimeError(f"verl sft failed: {r.stderr[-2000:]}")
    before = json.loads(r.stdout.strip().splitlines()[-1])["accuracy"]
    batch = load_job(JOB, list(extra)).algorithm.params.batch_size
    run = work / "run"
    rc, wall, evals = launch_warm_started(JOB, run, sets, sft_dir, updates, batch, 2, extra,
                                          timeout)
    metrics = [e for e in events(run / "logs" / "learner-0.jsonl")
               if e.get("event") == "metrics" and "charts/kl_ref" in e]
    # the sampled responses' mean reward over the first and the last tenth of the updates
    rewards = [e["grpo/reward_mean"] for e in metrics if "grpo/reward_mean" in e]
    tenth = max(1, len(rewards) // 10)
    return {"seed": seed, "rc": rc, "wall_s": round(wall, 1), "before": before,
            "after": evals[-1]["eval/return_mean"] if evals else None,
            "kl_ref": metrics[-1]["charts/kl_ref"] if metrics else None,
            "updates": metrics[-1].get("learner/updates") if metrics else None,
            "train_reward_first": round(sum(rewards[:tenth]) / tenth, 3) if rewards else None,
            "train_reward_last": round(sum(rewards[-tenth:]) / tenth, 3) if rewards else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--updates", type=int, default=100)
    ap.add_argument("--sft-steps", type=int, default=150)
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--keep", help="a folder to keep the seeds' runs in (default: a temporary one)")
    ap.add_argument("--set", dest="sets", action="append", default=[],
                    help="A job override for the GRPO job (section.key=value).")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        if a.keep:
            tmp = a.keep
        for seed in a.seeds:
            row = run_once(seed, Path(tmp) / f"seed{seed}", a.updates, a.sft_steps,
                           a.timeout, tuple(a.sets))
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(f"\n{a.sft_steps} SFT steps on the worked solutions, then {a.updates} GRPO updates "
          f"(LoRA all-linear); val exact match, greedy, {VAL} prompts\n")
    print("| seed | warm start | after GRPO | rise | 1 std of the val mean | rise in std "
          "| KL to ref | job wall s |\n|---|---|---|---|---|---|---|---|")
    for r in rows:
        p = r["before"]
        std = math.sqrt(max(p * (1 - p), 1e-12) / VAL)
        rise = (r["after"] - p) if r["after"] is not None else float("nan")
        print(f"| {r['seed']} | {p:.3f} | {r['after']} | {rise:+.3f} | {std:.3f} | "
              f"{rise / std:+.1f} | {r['kl_ref']} | {r['wall_s']} |")


if __name__ == "__main__":
    main()
