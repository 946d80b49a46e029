#!/usr/bin/env python
"""The calculator task with and without tools, from a clean start, over seeds.

For each seed: `verl data calc`'s files (multiply two 3-4 digit numbers; written
here), the model of configs/calc_hf_grpo.toml built from its config, and:

  tools      `verl sft` on the demonstrations (a calculator call, its answer, the
             copied result; the answers' tokens not learned) for --sft-steps,
             then the GRPO job with tools (multi-turn rollouts) through real
             samplers and the learner (verl-launch) for --updates updates
  no tools   the same model and steps of `verl sft` on the bare answer, no tools:
             it must multiply in its head

Printed per seed: val exact match after SFT and after GRPO (the job's final
evaluation, with tools), the rate of well-formed tool calls in the job's
rollouts (calls that parsed and named a known tool, over the calls written), and
exact match without tools after SFT.

    python tools/bench/calc_tools.py --seeds 0 1 2 [--sft-steps 250] [--updates 40] [--keep DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tools.harness import events, launch_warm_started  # noqa: E402

JOB = ROOT / "configs" / "calc_hf_grpo.toml"
SFT_STEPS = 250
UPDATES = 40


def _sft(work: Path, out: Path, steps: int, sets: list[str], tools: bool) -> float:
    """`verl sft` on the demonstrations (with tools) or the bare answers; its val
    exact match."""
    key = "extra_info.answer" if tools else "reward_model.ground_truth"
    if not tools:
        sets = [*sets, "environment.kwargs.tools=[]"]
    cmd = [sys.executable, "-m", "verl_zmq.cli", "sft", str(JOB), "--out", str(out),
           "--steps", str(steps), "--eval-every", str(steps), "--response-key", key,
           *[x for s in sets for x in ("--set", s)]]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=3600)
    if r.returncode:
        raise RuntimeError(f"verl sft failed: {r.stderr[-2000:]}")
    return float(json.loads(r.stdout.strip().splitlines()[-1])["accuracy"])


def run_once(seed: int, work: Path, sft_steps: int, updates: int) -> dict:
    from verl_zmq.config import load_job
    from verl_zmq.seq.toy_prompts import toy_rows, write_prompts

    work.mkdir(parents=True, exist_ok=True)
    write_prompts(work / "train.parquet", toy_rows("calc", 2000, 1000 + seed, 3, 4))
    write_prompts(work / "val.parquet", toy_rows("calc", 100, 2000 + seed, 3, 4))
    sets = [f"environment.kwargs.train_files={work / 'train.parquet'}",
            f"environment.kwargs.val_files={work / 'val.parquet'}",
            "environment.kwargs.val_prompts=100", f"experiment.seed={seed}"]
    bare = _sft(work, work / "sft-bare", sft_steps, sets, tools=False)
    before = _sft(work, work / "sft", sft_steps, sets, tools=True)
    run = work / "run"
    batch = load_job(JOB).algorithm.params.batch_size
    rc, wall, evals = launch_warm_started(JOB, run, sets, work / "sft", updates, batch, 2,
                                          timeout=3600)
    calls = formed = 0.0
    for log in sorted((run / "logs").glob("sampler-*.jsonl")):
        last = [e for e in events(log) if "sampler/tool_calls" in e]
        if last:
            calls += last[-1]["sampler/tool_calls"]
            formed += last[-1]["sampler/tool_calls_well_formed"]
    return {"seed": seed, "rc": rc, "wall_s": round(wall, 1), "sft_tools": before,
            "grpo_tools": evals[-1]["eval/return_mean"] if evals else None,
            "well_formed": round(formed / calls, 3) if calls else None,
            "tool_calls": int(calls), "sft_no_tools": bare}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--sft-steps", type=int, default=SFT_STEPS)
    ap.add_argument("--updates", type=int, default=UPDATES)
    ap.add_argument("--keep", type=Path, default=None,
                    help="keep each seed's files, models and run under this folder")
    a = ap.parse_args()
    rows = []
    with contextlib.ExitStack() as stack:
        tmp = str(a.keep) if a.keep else stack.enter_context(tempfile.TemporaryDirectory())
        for seed in a.seeds:
            rows.append(run_once(seed, Path(tmp) / f"seed{seed}", a.sft_steps, a.updates))
            print(json.dumps(rows[-1]), flush=True)
    print("\n| seed | exact match, SFT with tools | after GRPO with tools | well-formed calls "
          "| exact match, SFT without tools | job wall s |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['seed']} | {r['sft_tools']:.2f} | {r['grpo_tools']} | {r['well_formed']} "
              f"| {r['sft_no_tools']:.2f} | {r['wall_s']} |")


if __name__ == "__main__":
    main()
