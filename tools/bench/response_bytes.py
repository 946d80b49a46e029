#!/usr/bin/env python
"""Bytes on the wire per response, two ways in one invocation, each a real
`wire.Fragment` encoded by the codec samplers use (every frame counted):

- per-token: a sequence task as an env (seq/env.py), one env step per token,
  every step carrying the whole token buffer (prompt + response so far, as
  float32 observations) beside its action, log-probability and flags;
- per-response: a prompt job (seq/generate.py), one fragment column per
  response: its tokens, their behaviour log-probabilities, its mask, its score,
  and its prompt once.

Prompts of `--prompt` tokens (512 by default); responses of 64, 256 and 1024.

    python tools/bench/response_bytes.py [--prompt 512] [--lengths 64 256 1024]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from verl_zmq import wire  # noqa: E402
from verl_zmq.batch import Layout  # noqa: E402
from verl_zmq.envs.make import EnvSpec  # noqa: E402

RESPONSES = 64  # per fragment: the bytes are per response


def _frame_bytes(arrays: dict[str, np.ndarray]) -> int:
    frames = wire.encode(wire.Fragment(version=1, arrays=arrays))
    return sum(len(memoryview(f).cast("B")) for f in frames)


def _arrays(layout: Layout, E: int) -> dict[str, np.ndarray]:
    out = {name: np.zeros(shape, dt) for name, dt, shape in layout.fields(E)}
    out["ep_return"] = np.zeros(E, np.float64)
    out["ep_length"] = np.zeros(E, np.int64)
    return out


def per_token(prompt: int, response: int, E: int = RESPONSES) -> float:
    """Bytes per response when each token is an env step over the whole buffer."""
    spec = EnvSpec(obs_shape=(prompt + response,), discrete=True, n_actions=16,
                   action_shape=())
    layout = Layout(spec, response + 1, ("logp",))  # a round: the response and a reset
    return _frame_bytes(_arrays(layout, E)) / E


def per_response(prompt: int, response: int, E: int = RESPONSES) -> float:
    """Bytes per response when one fragment column is one whole response."""
    spec = EnvSpec(obs_shape=(0,), discrete=True, n_actions=2**31 - 1, action_shape=())
    layout = Layout(spec, response, ("logp",), prompt_len=prompt)
    return _frame_bytes(_arrays(layout, E)) / E


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--lengths", type=int, nargs="+", default=[64, 256, 1024])
    a = ap.parse_args()
    print(f"prompt {a.prompt} tokens, {RESPONSES} responses per fragment\n")
    print("| response tokens | per-token path, bytes/response | per-response path | ratio |")
    print("|---|---|---|---|")
    for n in a.lengths:
        old, new = per_token(a.prompt, n), per_response(a.prompt, n)
        print(f"| {n} | {old:,.0f} | {new:,.0f} | {old / new:,.1f}x |")


if __name__ == "__main__":
    main()
