#!/usr/bin/env python
"""Generation at post-training's sizes: whole-prefix recomputation (what samplers
do: the policy reads the token buffer each step) against a key/value cache over
the same weights (each step attends with one new query). Checks that both give
the same logits, then times generating a whole response for a batch of prompts
both ways, side by side, in one process and one thread.

    python tools/bench_decode.py                        # the shipped reversal job
    python tools/bench_decode.py --batch 64 256 --d-model 64 128
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from verl_zmq.config import load_job  # noqa: E402
from verl_zmq.envs import env_spec  # noqa: E402
from verl_zmq.seq.model import TokenActorCritic  # noqa: E402
from verl_zmq.seq.tasks import FIRST_ACTION_TOKEN, SEP  # noqa: E402

JOB = Path(__file__).resolve().parent.parent / "configs" / "reverse_grpo.toml"


def cached_generate(net: TokenActorCritic, prompts: torch.Tensor, steps: int) -> torch.Tensor:
    """Greedy logits of `steps` tokens after `prompts` [B, P], with a key/value cache
    per layer: the prompt in one pass, then one position per step."""
    tr = net.trunk
    B, P = prompts.shape
    sep = (prompts == SEP).int().argmax(1, keepdim=True)
    caches: list[tuple[torch.Tensor, torch.Tensor]] = []
    out = []
    tokens = prompts
    for step in range(steps + 1):
        start = 0 if step == 0 else P + step - 1
        pos = torch.arange(start, P + step, device=tokens.device) - sep + tr.length
        x = tr.tok(tokens) + tr.pos(pos)
        for i, layer in enumerate(tr.blocks.layers):
            x, kv = _layer(layer, x, caches[i] if step else None)
            caches[i:i + 1] = [kv]
        logits = net.pi(tr.norm(x[:, -1]))
        out.append(logits)
        tokens = logits.argmax(-1, keepdim=True) + FIRST_ACTION_TOKEN
    return torch.stack(out[:steps], 1)


def _layer(layer, x, cache):
    """One pre-norm encoder layer on the new positions `x`, attending to the cache."""
    attn = layer.self_attn
    h = layer.norm1(x)
    q, k, v = F.linear(h, attn.in_proj_weight, attn.in_proj_bias).chunk(3, -1)
    B, n, d = q.shape
    H = attn.num_heads

    def heads(t):
        return t.view(B, -1, H, d // H).transpose(1, 2)

    q, k, v = heads(q), heads(k), heads(v)
    if cache is not None:
        k, v = torch.cat([cache[0], k], 2), torch.cat([cache[1], v], 2)
    a = F.scaled_dot_product_attention(q, k, v, is_causal=cache is None)
    x = x + attn.out_proj(a.transpose(1, 2).reshape(B, n, d))
    x = x + layer.linear2(layer.activation(layer.linear1(layer.norm2(x))))
    return x, (k, v)


def recompute_generate(net: TokenActorCritic, prompts: torch.Tensor, steps: int,
                       L: int) -> torch.Tensor:
    """The same, as a sampler acts: the padded buffer through the whole net each step."""
    B, P = prompts.shape
    buf = torch.zeros(B, L)
    buf[:, :P] = prompts
    out = []
    for t in range(steps):
        logits = net.dist(buf).logits
        out.append(logits)
        buf[:, P + t] = (logits.argmax(-1) + FIRST_ACTION_TOKEN).float()
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
                ref = recompute_generate(net, prompts, steps, L)
                got = cached_generate(net, prompts, steps)
                err = float((ref - got).abs().max())
                assert err < 1e-4, f"cached logits differ from recomputed ones by {err}"
                r = timed(lambda n=net, p=prompts: recompute_generate(n, p, steps, L), a.reps)
                c = timed(lambda n=net, p=prompts: cached_generate(n, p, steps), a.reps)
            print(f"{d:>7} {B:>5} {r * 1e3:>12.2f} {c * 1e3:>11.2f} {c / r:>6.2f}"
                  f"  (logits agree to {err:.1e})")


if __name__ == "__main__":
    main()
