#!/usr/bin/env python
"""Fuzz the codec: for every message kind, N mutations of a valid message plus
N random frame lists; decode must raise WireError and nothing else.

    python tools/faults/fuzz_codec.py [--per-kind 10000] [--seed 0]
"""

from __future__ import annotations

import argparse
import random
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout

from verl_zmq import wire  # noqa: E402
from verl_zmq.wire.samples import (
    mutate,  # noqa: E402
    samples,  # noqa: E402
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-kind", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    crashes = 0
    print(f"{'kind':<22}{'sent':>8}{'accepted':>10}{'rejected':>10}{'crashes':>9}")
    for msg in samples():
        frames = [bytes(f) for f in wire.encode(msg)]
        counts = [0, 0, 0]
        for i in range(args.per_kind):
            if i % 4 == 3:
                case = [rng.randbytes(rng.randrange(256)) for _ in range(rng.randint(0, 3))]
            else:
                case = mutate(frames, rng)
            try:
                wire.decode(case)
                counts[0] += 1
            except wire.WireError:
                counts[1] += 1
            except Exception:  # a crash: the codec let something else escape
                counts[2] += 1
                if counts[2] == 1:
                    traceback.print_exc()
        crashes += counts[2]
        print(f"{type(msg).__name__:<22}{args.per_kind:>8}{counts[0]:>10}{counts[1]:>10}"
              f"{counts[2]:>9}")
    print(f"total crashes: {crashes}")
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
