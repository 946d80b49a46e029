#!/usr/bin/env python
"""Post-training a Hugging Face model as verl users do, from a clean start: the
procedure `tests/test_hf_posttrain.py` runs once, here over seeds.

For each seed: a train and a val parquet in verl's columns (reverse 4-6 digits,
written here), a `compute_score` in a module outside the package (exact match
with a little partial credit as the reward, exact match as `acc`), a tiny Llama built from
configs/reverse_hf_grpo.toml's config, a short `verl sft` warm start, then the
GRPO job through real samplers and the learner (verl-launch) for a fixed number
of updates. Prints val exact match before (the warm start's) and after (the
job's final evaluation), the rise, the KL to the reference at the last update,
and the job's wall time.

    python tools/bench/hf_grpo.py --seeds 0 1 2 3 4
    python tools/bench/hf_grpo.py --seeds 0 1 --set algorithm.params.learning_rate=1e-3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tools.harness import events, launch_warm_started  # noqa: E402

JOB = ROOT / "configs" / "reverse_hf_grpo.toml"
SCORER = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """Exact match, plus a little partial credit (characters in place) as the reward;
    exact match alone as acc (what validation reports)."""
    said, want = solution_str.strip(), str(ground_truth)
    exact = float(said == want)
    right = sum(a == b for a, b in zip(said, want))
    return {"score": exact + 0.2 * right / max(len(said), len(want), 1), "acc": exact}
'''
SFT_STEPS = 130
UPDATES = 150
BATCH = 1024  # the job's batch_size in token slots (2 fragments of 64 x 8)


def prepare(work: Path, seed: int) -> list[str]:
    """The files and the scorer module in `work`; the job's overrides for them."""
    from verl_zmq.seq.toy_prompts import toy_rows, write_prompts

    write_prompts(work / "train.parquet", toy_rows("reverse", 2000, 1000 + seed, 4, 6))
    write_prompts(work / "val.parquet", toy_rows("reverse", 200, 2000 + seed, 4, 6))
    (work / "toyscore.py").write_text(SCORER)
    return [f"environment.kwargs.train_files={work / 'train.parquet'}",
            f"environment.kwargs.val_files={work / 'val.parquet'}",
            "environment.kwargs.reward=toyscore:compute_score",
            f"experiment.seed={seed}"]


def warm_start(seed: int, work: Path, sft_steps: int = SFT_STEPS, timeout: float = 600
               ) -> tuple[list[str], dict[str, str], Path, float]:
    """The files, `verl sft`'s warm start in `work/sft`: (the job's overrides, the
    environment the roles need, the folder, its val exact match)."""
    work.mkdir(parents=True, exist_ok=True)
    sets = prepare(work, seed)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(work), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    sft_dir = work / "sft"
    cmd = [sys.executable, "-m", "verl_zmq.cli", "sft", str(JOB), "--out", str(sft_dir),
           "--steps", str(sft_steps), "--lr", "3e-3", "--eval-every", str(sft_steps),
           # the constant step size, unclipped, that docs/benchmarks.md's row was run with
           "--lr-scheduler", "constant", "--warmup-ratio", "0", "--clip-grad", "1e9",
           *[x for s in sets for x in ("--set", s)]]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout)
    if r.returncode:
        raise RuntimeError(f"verl sft failed: {r.stderr[-2000:]}")
    return sets, env, sft_dir, json.loads(r.stdout.strip().splitlines()[-1])["accuracy"]


def train(seed: int, run: Path, start: tuple[list[str], dict[str, str], Path, float],
          updates: int = UPDATES, timeout: float = 600, extra: tuple[str, ...] = ()) -> dict:
    """The GRPO job from a warm start (`warm_start`'s) in `run`; what it measured."""
    sets, env, sft_dir, before = start
    batch = next((int(x.split("=")[1]) for x in extra
                  if x.startswith("algorithm.params.batch_size=")), BATCH)
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = env["PYTHONPATH"]  # the roles import the scorer module
    try:
        rc, wall, evals = launch_warm_started(JOB, run, sets, sft_dir, updates, batch, 3,
                                              extra, timeout)
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old
    metrics = [e for e in events(run / "logs" / "learner-0.jsonl") if e.get("event") == "metrics"
               and "charts/kl_ref" in e]
    lags = [e["learner/policy_lag_mean"] for e in metrics if "learner/policy_lag_mean" in e]
    return {"seed": seed, "rc": rc, "wall_s": round(wall, 1), "before": before,
            "after": evals[-1]["eval/return_mean"] if evals else None,
            "final": bool(evals and evals[-1].get("final")),
            "first_eval_steps": evals[0]["env_steps"] if evals else None,
            "kl_ref": metrics[-1]["charts/kl_ref"] if metrics else None,
            "updates": metrics[-1].get("learner/updates") if metrics else None,
            "policy_lag_mean": round(sum(lags) / len(lags), 2) if lags else None,
            "run": str(run)}


def run_once(seed: int, work: Path, updates: int = UPDATES, sft_steps: int = SFT_STEPS,
             timeout: float = 600, extra: tuple[str, ...] = ()) -> dict:
    """One seed of the procedure (see the module); what it measured."""
    return train(seed, work / "run", warm_start(seed, work, sft_steps, timeout), updates,
                 timeout, extra)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--updates", type=int, default=UPDATES)
    ap.add_argument("--set", dest="sets", action="append", default=[],
                    help="A job override for the GRPO job (section.key=value).")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in a.seeds:
            row = run_once(seed, Path(tmp) / f"seed{seed}", a.updates, extra=tuple(a.sets))
            row.pop("run")
            row.pop("first_eval_steps")
            rows.append(row)
            print(json.dumps(row), flush=True)
    print("\n| seed | val exact match before | after | rise | KL to ref | updates | job wall s |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        rise = r["after"] - r["before"] if r["after"] is not None else float("nan")
        print(f"| {r['seed']} | {r['before']:.2f} | {r['after']} | {rise:+.2f} | "
              f"{r['kl_ref']} | {r['updates']} | {r['wall_s']} |")
    rises = [r["after"] - r["before"] for r in rows if r["after"] is not None]
    if rises:
        print(f"\nworst rise {min(rises):+.2f}, mean {sum(rises) / len(rises):+.2f} over "
              f"{len(rises)} seeds")


if __name__ == "__main__":
    main()
