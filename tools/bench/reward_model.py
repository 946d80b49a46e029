#!/usr/bin/env python
"""A learned reward model against the rule it stands in for, on the reverse task
(tools/bench/hf_grpo.py's procedure: a tiny Llama, `verl sft`, then GRPO).

For each seed, from one warm start: the GRPO job with the rule's reward; and the
same job with a reward model that `verl rm-train` trained on the rule's scores
of samples, `--data scored` (default): `--samples` responses to each of 2,000
train prompts drawn from the warm start itself at temperature 1 (what the
policy writes, as verl's reward models are trained on its rollouts), each
scored by the job's rule; or `--data pairs`: the right reversal chosen over a
made-up wrong one (one digit changed, unreversed, or one dropped). Both runs
are validated by the rule (exact match). Prints exact match before and after
for both, and the reward model's share of the rule's.

    python tools/bench/reward_model.py --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tools.bench.hf_grpo import UPDATES, train, warm_start  # noqa: E402

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


def pairs(work: Path, seed: int, n: int) -> list[dict]:
    from verl_zmq.seq.toy_prompts import toy_rows

    rng = random.Random(seed)
    return [{"prompt": r["prompt"], "chosen": r["reward_model"]["ground_truth"],
             "rejected": wrong(r["reward_model"]["ground_truth"], rng)}
            for r in toy_rows("reverse", n, 5000 + seed, 4, 6)]


def scored(work: Path, sft: Path, samples: int) -> list[dict]:
    """`samples` responses to each train prompt from the warm start, scored by the
    job's rule (the scorer module `prepare` wrote into `work`)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl_zmq.seq.data import chat_prompt, read_prompts
    from verl_zmq.seq.hf import Sampling, generate, pad_left

    spec = importlib.util.spec_from_file_location("toyscore", work / "toyscore.py")
    assert spec is not None and spec.loader is not None
    rule = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rule)
    tok = AutoTokenizer.from_pretrained(sft)
    model = AutoModelForCausalLM.from_pretrained(sft).eval()
    records = read_prompts(work / "train.parquet")
    out = []
    s = Sampling(n=samples, temperature=1.0, max_new_tokens=8)
    for lo in range(0, len(records), 128):
        rs = records[lo:lo + 128]
        ids = [tok(chat_prompt(r.messages, tok), add_special_tokens=False).input_ids for r in rs]
        prompt, mask = pad_left(ids, tok.pad_token_id)
        with torch.no_grad():
            g = generate(model, prompt, mask, s, tok.eos_token_id, tok.pad_token_id)
        for j, (row, m) in enumerate(zip(g.response.tolist(), g.mask.tolist(), strict=True)):
            r = rs[j // samples]
            text = tok.decode([t for t, k in zip(row, m, strict=True)
                               if k and t != tok.eos_token_id], skip_special_tokens=True)
            score = rule.compute_score(r.data_source, text, r.ground_truth)["score"]
            out.append({"prompt": [{"role": a, "content": c} for a, c in r.messages],
                        "response": text, "score": score})
    return out


def train_rm(work: Path, rows: list[dict], seed: int, steps: int) -> Path:
    data = work / "rm_data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
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
    ap.add_argument("--data", choices=["scored", "pairs"], default="scored")
    ap.add_argument("--samples", type=int, default=4, help="responses a prompt (scored)")
    ap.add_argument("--rm-steps", type=int, default=600)
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in a.seeds:
            work = Path(tmp) / f"seed{seed}"
            start = warm_start(seed, work)
            data = scored(work, start[2], a.samples) if a.data == "scored" \
                else pairs(work, seed, 4000)
            rm = train_rm(work, data, seed, a.rm_steps)
            rule = train(seed, work / "rule", start, a.updates)
            model = train(seed, work / "model", start, a.updates,
                          extra=(f'environment.kwargs.reward="model:{rm}"',))
            row = {"seed": seed, "before": start[3], "rule": rule["after"],
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
