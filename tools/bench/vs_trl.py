#!/usr/bin/env python
"""Ours and TRL's `GRPOTrainer` side by side, one after the other per seed, from
the same warm start: the same tiny Llama (configs/reverse_hf_grpo.toml's
config, warm-started by `verl sft` for 130 steps), character tokenizer and chat
template, train and val parquet files (tools/bench/hf_grpo.py writes them), the
same scorer module (its `score` the reward, its `acc` what validation reads),
the same torch threads in all (2: this machine's cores).

Settings, mapped (printed at the start): TRL `num_generations` = our
`group_size` (8); `beta` = `kl_coef` (0.001, k3 as a loss both sides);
`loss_type` "grpo" (each response's token mean, averaged over responses) = our
`loss_agg` "seq-mean-token-mean"; `epsilon`/`epsilon_high` =
`clip_low`/`clip_high` (0.2/0.28); `num_iterations` = `n_epochs` (1);
`max_completion_length` = `max_response_length` (8); learning rate 5e-4,
constant, Adam(W) both sides; 16 prompts per step (`batch_size` 1024 token
slots = 128 responses), one optimiser step per batch (TRL's
`gradient_accumulation_steps` = `steps_per_generation` = 1: our
`minibatch_size` = `batch_size`); no validation before training on either side
(TRL's callback first runs after step 10: our `evaluation.before_training` off).
Ours otherwise as shipped (its samplers at `resources.sampler.nice` 10: the
learner first on the shared cores).

Measured, each side: whole-process wall time from its start until greedy exact
match on the val file first reaches `--target` (ours: the evaluator's
`eval/return_mean`, every 10 updates' worth of token slots; TRL: a callback
every 10 steps, stopping the trainer), generated tokens per second over that
whole process, and the last exact match. A side that does not reach the target
in `--max-updates` reports its last.

    python tools/bench/vs_trl.py --seeds 0 1 2 [--target 0.8]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tools.bench.hf_grpo import BATCH, JOB, SFT_STEPS, prepare  # noqa: E402
from tools.harness import events, launch  # noqa: E402

GROUP, PROMPTS, LR, BETA, EPS, EPS_HIGH, RESPONSE = 8, 16, 5e-4, 0.001, 0.2, 0.28, 8
EVAL_EVERY = 10

MAPPING = [("num_generations", GROUP, "environment.kwargs.group_size"),
           ("beta", BETA, "algorithm.params.kl_coef (kl_estimator k3, kl_in loss)"),
           ("loss_type", "grpo", "algorithm.params.loss_agg = seq-mean-token-mean"),
           ("epsilon / epsilon_high", f"{EPS} / {EPS_HIGH}", "clip_low / clip_high"),
           ("num_iterations", 1, "n_epochs"),
           ("max_completion_length", RESPONSE, "environment.kwargs.max_response_length"),
           ("learning_rate (constant)", LR, "learning_rate"),
           ("per_device_train_batch_size", PROMPTS * GROUP,
            f"batch_size {BATCH} token slots = {BATCH // RESPONSE} responses"),
           ("steps_per_generation", 1, f"minibatch_size {BATCH}: one step per batch"),
           ("(evaluation at step 0)", "none", "evaluation.before_training = false"),
           ("torch threads", 2, "2 cores: learner and samplers share them")]


def ours(seed: int, work: Path, sets: list[str], sft: Path, target: float,
         max_updates: int, env: dict) -> dict:
    run = work / "ours"
    os.environ["PYTHONPATH"] = env["PYTHONPATH"]
    t0 = time.time()
    rc, wall = launch(JOB, run, [*sets, f"algorithm.policy.path={sft}",
                                 "algorithm.policy.tokenizer=",
                                 "algorithm.params.loss_agg=seq-mean-token-mean",
                                 f"algorithm.params.learning_rate={LR}",
                                 f"algorithm.params.kl_coef={BETA}",
                                 f"algorithm.params.minibatch_size={BATCH}",
                                 "evaluation.before_training=false",
                                 f"training.total_timesteps={max_updates * BATCH}",
                                 f"evaluation.interval_steps={EVAL_EVERY * BATCH}",
                                 f"evaluation.stop_at_return={target}"], timeout=1800)
    evals = [e for e in events(run / "logs" / "evaluator-0.jsonl")
             if e.get("event") == "evaluated"]
    hit = next((e for e in evals if e["eval/return_mean"] >= target), None)
    tokens = sum(max([e.get("sampler/tokens", 0) for e in events(p)
                      if e.get("event") == "metrics"] or [0])
                 for p in (run / "logs").glob("sampler-*.jsonl"))
    end = hit["ts"] if hit else t0 + wall
    return {"rc": rc, "to_target_s": round(hit["ts"] - t0, 1) if hit else None,
            "wall_s": round(wall, 1), "tokens_per_s": round(tokens / max(end - t0, 1e-9)),
            "final": evals[-1]["eval/return_mean"] if evals else None}


def trl(seed: int, work: Path, sft: Path, target: float, max_updates: int, env: dict) -> dict:
    t0 = time.time()
    p = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "bench" / "trl_side.py"), "--model", str(sft),
         "--train", str(work / "train.parquet"), "--val", str(work / "val.parquet"),
         "--scorer", "toyscore:compute_score", "--out", str(work / "trl"),
         "--target", str(target), "--max-steps", str(max_updates),
         "--eval-every", str(EVAL_EVERY), "--seed", str(seed), "--lr", str(LR),
         "--beta", str(BETA), "--epsilon", str(EPS), "--epsilon-high", str(EPS_HIGH),
         "--group", str(GROUP), "--prompts", str(PROMPTS), "--max-completion", str(RESPONSE)],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=3600)
    wall = time.time() - t0
    lines = []
    for x in p.stdout.splitlines():  # the trainer prints its logs as dicts beside ours
        try:
            lines.append(json.loads(x))
        except ValueError:
            continue
    done = next((x for x in lines if x["event"] == "done"), None)
    if p.returncode or done is None:
        return {"rc": p.returncode, "error": p.stderr[-1500:]}
    end = done["reached_t"] or t0 + wall
    return {"rc": 0, "to_target_s": round(done["reached_t"] - t0, 1) if done["reached_t"]
            else None, "wall_s": round(wall, 1),
            "tokens_per_s": round(done["tokens"] / max(end - t0, 1e-9)),
            "final": done["final"], "steps": done["steps"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--target", type=float, default=0.8)
    ap.add_argument("--max-updates", type=int, default=400)
    a = ap.parse_args()
    print(f"target: greedy exact match {a.target} on the val file (stated before the run)")
    print("\n| TRL GRPOConfig | value | ours |\n|---|---|---|")
    for k, v, o in MAPPING:
        print(f"| {k} | {v} | {o} |")
    rows = []
    with tempfile.TemporaryDirectory(prefix="vs-trl-") as tmp:
        for seed in a.seeds:
            work = Path(tmp) / f"seed{seed}"
            work.mkdir()
            sets = prepare(work, seed)
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(
                [str(work), str(ROOT), os.environ.get("PYTHONPATH", "")])}
            sft = work / "sft"
            r = subprocess.run(
                [sys.executable, "-m", "verl_zmq.cli", "sft", str(JOB), "--out", str(sft),
                 "--steps", str(SFT_STEPS), "--lr", "3e-3", "--eval-every", str(SFT_STEPS),
                 *[x for s in sets for x in ("--set", s)]],
                capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
            start = json.loads(r.stdout.strip().splitlines()[-1])["accuracy"]
            t = trl(seed, work, sft, a.target, a.max_updates, env)
            o = ours(seed, work, sets, sft, a.target, a.max_updates, env)
            row = {"seed": seed, "start": start, "trl": t, "ours": o}
            print(json.dumps(row), flush=True)
            rows.append(row)
    print("\n| seed | start | TRL s to target | ours s to target | ours/TRL | TRL tokens/s | "
          "ours tokens/s | TRL final | ours final |")
    print("|---|---|---|---|---|---|---|---|---|")
    ratios = []
    for r in rows:
        t, o = r["trl"], r["ours"]
        ratio = (o["to_target_s"] / t["to_target_s"]) if o.get("to_target_s") and \
            t.get("to_target_s") else None
        if ratio is not None:
            ratios.append(ratio)
        print(f"| {r['seed']} | {r['start']} | {t.get('to_target_s')} | {o.get('to_target_s')} | "
              f"{'-' if ratio is None else f'{ratio:.2f}'} | {t.get('tokens_per_s')} | "
              f"{o.get('tokens_per_s')} | {t.get('final')} | {o.get('final')} |")
    if ratios:
        print(f"\nours/TRL whole-process time to {a.target}: mean {sum(ratios) / len(ratios):.2f} "
              f"over {len(ratios)} seeds both reached")


if __name__ == "__main__":
    main()
