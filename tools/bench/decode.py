#!/usr/bin/env python
"""Generation at post-training's sizes: a sampler's acting path (the policy reads
the token buffer each step; `seq/decode.py` keeps a key/value cache so only the
new token takes a pass) against whole-prefix recomputation over the same
weights. Checks that both give the same logits, then times generating a whole
response for a batch of prompts both ways, side by side, in one process and
one thread.

    python tools/bench/decode.py                        # the shipped reversal job
    python tools/bench/decode.py --batch 64 256 --d-model 64 128
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from verl_zmq.config import load_job  # noqa: E402
from verl_zmq.envs.make import env_spec  # noqa: E402
from verl_zmq.seq.model import TokenActorCritic  # noqa: E402
from verl_zmq.seq.tasks import FIRST_ACTION_TOKEN, SEP  # noqa: E402

JOB = Path(__file__).resolve().parents[2] / "configs" / "reverse_grpo.toml"


def generate(net: TokenActorCritic, prompts: torch.Tensor, steps: int, L: int,
             acting: bool, force: torch.Tensor | None = None) -> torch.Tensor:
    """Greedy log-probabilities of `steps` tokens after `prompts` [B, P], stepping a
    padded buffer as a sampler does: `acting` with the key/value cache, else the
    whole buffer through the net each step. With `force` [B, steps], those tokens
    are appended instead of the greedy ones."""
    B, P = prompts.shape
    buf = torch.zeros(B, L)
    buf[:, :P] = prompts
    out = []
    for t in range(steps):
        logits = net.dist(buf.clone(), acting=acting).logits
        out.append(logits)
        buf[:, P + t] = (logits.argmax(-1) + FIRST_ACTION_TOKEN).float() if force is None \
            else force[:, t].float()
    return torch.stack(out, 1)


def timed(fn, reps: int) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, nargs="+", default=[64])
    ap.add_argument("--d-model", type=int, nargs="+", default=[64])
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    torch.set_num_threads(1)
    job = load_job(JOB)
    spec = env_spec(job.environment)
    L = spec.obs_shape[0]
    P, steps = 10, L - 10  # the longest prompt, then a whole response
    print(f"{'d_model':>7} {'batch':>5} {'recompute ms':>12} {'kv cache ms':>11} "
          f"{'ratio':>6}  (one response of {steps} tokens; ratio = cache / recompute)")
    for d in a.d_model:
        pol = job.algorithm.policy.__class__(kind="transformer", d_model=d,
                                             n_layers=job.algorithm.policy.n_layers,
                                             n_heads=job.algorithm.policy.n_heads,
                                             shared_trunk=True)
        torch.manual_seed(0)
        net = TokenActorCritic(spec, pol).eval()
        for B in a.batch:
            prompts = torch.cat([torch.ones(B, 1), torch.randint(4, 14, (B, P - 2)),
                                 torch.full((B, 1), float(SEP))], 1).long()
            with torch.no_grad():
                ref = generate(net, prompts, steps, L, acting=False)
                chosen = ref.argmax(-1) + FIRST_ACTION_TOKEN  # near-ties: follow one path
                got = generate(net, prompts, steps, L, acting=True, force=chosen)
                err = float((ref - got).abs().max())
                assert err < 1e-4, f"cached logits differ from recomputed ones by {err}"
                r = timed(lambda n=net, p=prompts: generate(n, p, steps, L, False), a.reps)
                c = timed(lambda n=net, p=prompts: generate(n, p, steps, L, True), a.reps)
            print(f"{d:>7} {B:>5} {r * 1e3:>12.2f} {c * 1e3:>11.2f} {c / r:>6.2f}"
                  f"  (logits agree to {err:.1e})")


if __name__ == "__main__":
    main()
