#!/usr/bin/env python
"""A learned reward model against the rule it stands in for: GRPO on the reverse
task (tools/bench/hf_grpo.py's procedure: a tiny Llama, `verl sft`, then the job)
once with the rule's reward and once with a reward model that `verl rm-train`
trained on preference pairs from the train file (the right reversal chosen; a
wrong one, one digit changed, the digits unreversed or one dropped, rejected).
Both runs are validated by the rule (exact match). Prints each seed's exact
match before and after for both, and the reward model's share of the rule's.

    python tools/bench/reward_model.py --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tools.bench.hf_grpo import UPDATES, run_once  # noqa: E402

RM_CONFIG = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
             "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
             "max_position_embeddings": 64}


def wrong(truth: str, rng: random.Random) -> str:
    """An answer the rule scores 0: one digit changed, unreversed, or one dropped."""
    kind = rng.randrange(3)
    if kind == 0:
        i = rng.randrange(len(truth))
        return truth[:i] + str((int(truth[i]) + rng.randrange(1, 10)) % 10) + truth[i + 1:]
    if kind == 1 and truth != truth[::-1]:
        return truth[::-1]
    i = rng.randrange(len(truth))
    return truth[:i] + truth[i + 1:]


def train_rm(work: Path, seed: int, pairs: int, steps: int) -> Path:
    """Pairs from a train file of the task (its own seed), and the reward model."""
    from verl_zmq.seq.toy_prompts import toy_rows

    rng = random.Random(seed)
    rows = toy_rows("reverse", pairs, 5000 + seed, 4, 6)
    data = work / "pairs.jsonl"
    with open(data, "w") as f:
        for r in rows:
            t = r["reward_model"]["ground_truth"]
            f.write(json.dumps({"prompt": r["prompt"], "chosen": t,
                                "rejected": wrong(t, rng)}) + "\n")
    out = work / "rm"
    r = subprocess.run([sys.executable, "-m", "verl_zmq.cli", "rm-train", str(data), "--out",
                        str(out), "--steps", str(steps), "--batch", "64", "--lr", "1e-3",
                        "--seed", str(seed), "--config", json.dumps(RM_CONFIG)],
                       capture_output=True, text=True, cwd=ROOT, timeout=3600)
    if r.returncode:
        raise RuntimeError(f"verl rm-train failed: {r.stderr[-2000:]}")
    print(r.stdout.strip().splitlines()[-1], flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--updates", type=int, default=UPDATES)
    ap.add_argument("--pairs", type=int, default=4000)
    ap.add_argument("--rm-steps", type=int, default=600)
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in a.seeds:
            work = Path(tmp) / f"seed{seed}"
            work.mkdir()
            rm = train_rm(work, seed, a.pairs, a.rm_steps)
            rule = run_once(seed, work / "rule", a.updates)
            model = run_once(seed, work / "model", a.updates,
                             extra=(f'environment.kwargs.reward="model:{rm}"',))
            row = {"seed": seed, "before": rule["before"], "rule": rule["after"],
                   "model": model["after"], "rc": [rule["rc"], model["rc"]]}
            rows.append(row)
            print(json.dumps(row), flush=True)
    print("\n| seed | before | rule reward | reward model | model / rule |")
    print("|---|---|---|---|---|")
    for r in rows:
        share = r["model"] / r["rule"] if r["rule"] else float("nan")
        print(f"| {r['seed']} | {r['before']:.3f} | {r['rule']} | {r['model']} | {share:.2f} |")


if __name__ == "__main__":
    main()
