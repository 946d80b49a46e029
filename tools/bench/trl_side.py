#!/usr/bin/env python
"""TRL's `GRPOTrainer` on a prompt file, as `tools/bench/vs_trl.py` runs it: one
process, timed whole by its caller. Every `--eval-every` steps a callback
answers the val file greedily (the same prompts, chat template and scorer's
`acc` as our evaluator) and stops training once exact match reaches
`--target`. Prints one JSON line per evaluation and a last one with what it
measured; wall-clock stamps are `time.time()` for the caller to compare with
its own start.
"""

from __future__ import annotations

import argparse
import json
import time

T_START = time.time()


def stop_callback(base: type, a: argparse.Namespace, accuracy, state: dict):  # noqa: ANN001
    """A TRL callback: evaluations every `a.eval_every` steps (their time counted
    apart), a stop at the target, the tokens generated."""

    class Stop(base):
        def on_step_end(self, args, st, control, model=None, **kw):  # noqa: ANN001
            if st.global_step == 1:
                state["first_step_t"] = time.time()
            if st.global_step % a.eval_every == 0:
                e0 = time.time()
                acc = accuracy(model)
                # the evaluation blocks training here (ours runs in its own process):
                # its time is taken out of the timed span
                state["eval_s"] += time.time() - e0
                state["acc"] = acc
                print(json.dumps({"event": "eval", "step": st.global_step, "t": time.time(),
                                  "acc": acc}), flush=True)
                if acc >= a.target and state["reached_t"] is None:
                    state["reached_t"] = time.time()
                    state["reached_step"] = st.global_step
                    state["eval_s_at_reach"] = state["eval_s"]
                    control.should_training_stop = True
            return control

        def on_train_begin(self, args, st, control, **kw):  # noqa: ANN001
            state["train_begin_t"] = time.time()
            return control

        def on_log(self, args, st, control, logs=None, **kw):  # noqa: ANN001
            if logs and "completions/mean_length" in logs:  # one log per step
                state["tokens"] += float(logs["completions/mean_length"]) * a.prompts * a.group
    return Stop


def main() -> None:
    ap = argparse.ArgumentParser()
    for k in ("model", "train", "val", "scorer", "out"):
        ap.add_argument(f"--{k}", required=True)
    ap.add_argument("--target", type=float, default=0.8)
    ap.add_argument("--max-steps", type=int, default=300)
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--beta", type=float, default=0.001)
    ap.add_argument("--epsilon", type=float, default=0.2)
    ap.add_argument("--epsilon-high", type=float, default=0.28)
    ap.add_argument("--loss-type", default="grpo")
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=16, help="prompts per step")
    ap.add_argument("--max-completion", type=int, default=8)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--iterations", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()

    import importlib

    import pyarrow.parquet as pq
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    imported_t = time.time()  # reported apart: TRL's imports are not its training
    torch.set_num_threads(a.threads)
    module, _, name = a.scorer.partition(":")
    score_fn = getattr(importlib.import_module(module), name)

    def rows(path: str) -> list[dict]:
        return pq.read_table(path).to_pylist()

    train = Dataset.from_list([{"prompt": r["prompt"], "data_source": r["data_source"],
                                "ground_truth": r["reward_model"]["ground_truth"]}
                               for r in rows(a.train)])
    val = rows(a.val)

    def text_of(c: object) -> str:
        return c[0]["content"] if isinstance(c, list) else str(c)

    def reward(prompts, completions, data_source, ground_truth, **kw):  # noqa: ANN001
        out = []
        for c, src, gt in zip(completions, data_source, ground_truth, strict=True):
            s = score_fn(src, text_of(c), gt, {})
            out.append(float(s["score"] if isinstance(s, dict) else s))
        return out

    tok = AutoTokenizer.from_pretrained(a.model)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(a.model)
    texts = [tok.apply_chat_template(r["prompt"], tokenize=False, add_generation_prompt=True)
             for r in val]
    enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)

    def accuracy(m: torch.nn.Module) -> float:
        was = m.training
        m.eval()
        hits = 0.0
        with torch.no_grad():
            for lo in range(0, len(val), 64):
                ids = enc["input_ids"][lo:lo + 64]
                out = m.generate(input_ids=ids, attention_mask=enc["attention_mask"][lo:lo + 64],
                                 do_sample=False, max_new_tokens=a.max_completion,
                                 pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
                done = tok.batch_decode(out[:, ids.shape[1]:], skip_special_tokens=True)
                for r, d in zip(val[lo:lo + 64], done, strict=True):
                    s = score_fn(r["data_source"], d, r["reward_model"]["ground_truth"], {})
                    hits += float(s.get("acc", s["score"]) if isinstance(s, dict) else s)
        m.train(was)
        return hits / len(val)

    state = {"reached_t": None, "acc": None, "tokens": 0.0, "eval_s": 0.0,
             "reached_step": None, "eval_s_at_reach": None}

    Stop = stop_callback(TrainerCallback, a, accuracy, state)

    cfg = GRPOConfig(output_dir=a.out, learning_rate=a.lr, lr_scheduler_type="constant",
                     per_device_train_batch_size=a.prompts * a.group,
                     num_generations=a.group, max_completion_length=a.max_completion,
                     beta=a.beta, epsilon=a.epsilon, epsilon_high=a.epsilon_high,
                     loss_type=a.loss_type, num_iterations=a.iterations,
                     temperature=a.temperature, report_to="none", use_cpu=True,
                     logging_steps=1, max_steps=a.max_steps, seed=a.seed, save_strategy="no",
                     bf16=False, disable_tqdm=True, warmup_steps=0)
    trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=cfg, train_dataset=train,
                          processing_class=tok, callbacks=[Stop()])
    t0 = time.time()
    trainer.train()
    train_s = time.time() - t0
    final = state["acc"] if state["acc"] is not None else accuracy(trainer.model)
    print(json.dumps({"event": "done", "start_t": T_START, "imported_t": imported_t,
                      "train_begin_t": state.get("train_begin_t", t0),
                      "first_step_t": state.get("first_step_t"),
                      "reached_t": state["reached_t"], "reached_step": state["reached_step"],
                      "eval_s_at_reach": state["eval_s_at_reach"], "eval_s": state["eval_s"],
                      "steps": trainer.state.global_step, "final": final,
                      "tokens": state["tokens"], "train_s": round(train_s, 2)}), flush=True)


if __name__ == "__main__":
    main()
