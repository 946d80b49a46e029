#!/usr/bin/env python
"""Post-training at a larger scale, on the CPU: a Llama config of about 100M
parameters built with random weights (the character tokenizer), one GRPO update
of `--responses` responses of `--prompt` + `--response` tokens.

- peak memory of the update, with and without gradient checkpointing, and with
  micro-batches of 2 responses: each arm in a fresh process, its peak resident
  set and that less the set before the update (the model and the batch; the
  optimiser's state, made by the first step, is in every arm's rise alike);
- bytes per version to samplers: the float32 arrays by name against one
  bfloat16 bucket (`dtype = "bfloat16"`), as encoded for the wire, and a
  sampler's time to load each.

    python tools/bench/hf_scale.py
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
JOB = ROOT / "configs" / "reverse_hf_grpo.toml"
MODEL = ('{ model_type = "llama", hidden_size = 768, intermediate_size = 2048, '
         'num_hidden_layers = 14, num_attention_heads = 12, num_key_value_heads = 12, '
         'max_position_embeddings = 1024 }')


def _job(a: argparse.Namespace, extra: list[str]):
    from verl_zmq.config import load_job

    n = a.responses
    return load_job(JOB, [
        "environment.kwargs.train_files=unused.parquet", "environment.kwargs.val_files=",
        f"environment.kwargs.max_prompt_length={a.prompt}",
        f"environment.kwargs.max_response_length={a.response}",
        f"environment.kwargs.group_size={n}", f"sampling.fragment_length={a.response}",
        f"sampling.num_envs_per_worker={n}", f"algorithm.params.batch_size={n * a.response}",
        f"algorithm.params.minibatch_size={n * a.response}", "algorithm.params.kl_coef=0.0",
        f"algorithm.policy.config={MODEL}", *extra])


def _batch(job, spec, a: argparse.Namespace) -> dict[str, np.ndarray]:
    """A fragment of random responses with distinct scores (a signal in the group)."""
    from verl_zmq.batch import job_layout

    rng = np.random.default_rng(0)
    out = {k: np.zeros(shape, dt) for k, dt, shape in
           job_layout(job, spec).fields(a.responses)}
    T, E = a.response, a.responses
    out["action"][:] = rng.integers(10, 100, (T, E))
    out["valid"][:] = True
    out["terminated"][-1] = True
    out["reward"][-1] = rng.random(E)
    out["logp"][:] = -4.0
    out["prompt"][:] = rng.integers(10, 100, out["prompt"].shape)
    return out


def arm(a: argparse.Namespace) -> None:
    """One update in this process: its peak memory over the memory before it."""
    import torch

    from verl_zmq.algos import make_algorithm
    from verl_zmq.envs.make import env_spec

    torch.set_num_threads(2)
    job = _job(a, a.set)
    spec = env_spec(job.environment)
    algo = make_algorithm(job, spec)
    batch = _batch(job, spec, a)
    params = sum(p.numel() for p in algo.model.parameters())
    now = _rss_kb()
    t0 = time.perf_counter()
    algo.learn(batch)  # its peak: activations, gradients and the optimiser's new state
    dt = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"params": params, "rss_before_mb": now / 1024,
                      "peak_mb": peak / 1024, "update_s": dt}))


def _rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def wire(a: argparse.Namespace) -> None:
    import torch

    from verl_zmq.algos import make_algorithm
    from verl_zmq.envs.make import env_spec
    from verl_zmq.wire.codec import decode, encode
    from verl_zmq.wire.messages import Params

    torch.set_num_threads(2)
    print("| weights | wire form | bytes per version | encode s | sampler load s |")
    print("|---|---|---|---|---|")
    for dtype in ("float32", "bfloat16"):
        job = _job(a, [f"algorithm.policy.dtype=\"{dtype}\""])
        spec = env_spec(job.environment)
        learner, sampler = make_algorithm(job, spec), make_algorithm(job, spec)
        t0 = time.perf_counter()
        frames = encode(Params(version=1, arrays=learner.wire_arrays()))
        enc = time.perf_counter() - t0
        size = sum(len(memoryview(f).cast("B")) for f in frames)
        t0 = time.perf_counter()
        sampler.load_policy_arrays(dict(decode(frames).arrays))
        load = time.perf_counter() - t0
        form = "named float32 arrays" if dtype == "float32" else "one bfloat16 bucket"
        print(f"| {dtype} | {form} | {size:,} | {enc:.2f} | {load:.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--responses", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--response", type=int, default=384)
    ap.add_argument("--arm", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--set", action="append", default=[], help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.arm:
        arm(a)
        return
    sizes = ["--responses", str(a.responses), "--prompt", str(a.prompt),
             "--response", str(a.response)]
    print(f"one update of {a.responses} responses of {a.prompt} + {a.response} tokens, "
          f"2 threads\n")
    print("| arm | params | resident before | peak during the update | above before | "
          "update s |\n|---|---|---|---|---|---|")
    for name, sets in (("plain", []),
                       ("gradient checkpointing", ["algorithm.policy.gradient_checkpointing=true"]),
                       ("micro-batches of 2", ["algorithm.params.micro_batch_size=2"]),
                       ("both", ["algorithm.policy.gradient_checkpointing=true",
                                 "algorithm.params.micro_batch_size=2"])):
        cmd = [sys.executable, __file__, "--arm", *sizes, *[f"--set={s}" for s in sets]]
        r = subprocess.run(cmd, capture_output=True, text=True, check=True)
        got = json.loads(r.stdout.strip().splitlines()[-1])
        print(f"| {name} | {got['params'] / 1e6:.1f}M | {got['rss_before_mb']:,.0f} MB | "
              f"{got['peak_mb']:,.0f} MB | {got['peak_mb'] - got['rss_before_mb']:,.0f} MB | "
              f"{got['update_s']:.1f} |")
    print()
    wire(a)


if __name__ == "__main__":
    main()
