#!/usr/bin/env python
"""Time to the first env step: from starting `verl-launch` to the first
`sampling_started` event in any sampler's log, for the main job, with the
samplers acting in numpy (the default) and in torch, launches alternating in
one invocation; `--arms numpy exec` compares the fork server (the default) with
every local role started as its own interpreter, `--arms numpy late` the torch
zygote started at verl-launch's first moment with one started once the job is
read (`python -m launcher.cli`). Also: when the learner's role
started (it imports torch) and when it finished its first update, beside a bare
`python -c "import torch"` timed before each launch (the floor of a learner's
first update: it cannot train before torch is imported).

    python tools/bench/startup.py [--launches 5] [--job configs/cartpole_ppo.toml] [--arms numpy]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: tools.*
from tools.harness import ROOT, events, sampling_start, start, stop  # noqa: E402

# "exec": numpy samplers, each local role its own interpreter (no fork server);
# "late": numpy samplers, the torch zygote started once the job is read (`launcher.cli`,
# not verl-launch's entry point, which starts it first)
ARMS = {"numpy": ['sampling.inference="numpy"'], "torch": ['sampling.inference="torch"'],
        "exec": ['sampling.inference="numpy"', "launch.fork_server=false"],
        "late": ['sampling.inference="numpy"']}


def first(run: Path, member: str, event: str) -> float | None:
    ts = [e["ts"] for e in events(run / "logs" / f"{member}.jsonl") if e.get("event") == event]
    return min(ts) if ts else None


def bare_torch() -> float:
    """Whole-process seconds of `python -c "import torch"`: the floor."""
    t0 = time.time()
    subprocess.run([sys.executable, "-c", "import torch"], check=True)
    return time.time() - t0


def one(job: str, arm: str, deadline_s: float = 120.0) -> list[float | None]:
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        t0 = time.time()
        p = start(job, run, ["launch.evaluators=1", *ARMS[arm]],
                  entry="launcher.cli" if arm == "late" else "launcher")
        try:
            while time.time() - t0 < deadline_s and sampling_start(run) is None:
                time.sleep(0.1)
            s = sampling_start(run)
            while time.time() - t0 < deadline_s and first(run, "learner-0", "first_update") is None:
                time.sleep(0.1)
            learner = first(run, "learner-0", "role_started")
            update = first(run, "learner-0", "first_update")
        finally:
            stop(p)
    return [t - t0 if t else None for t in (s, learner, update)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=5)
    ap.add_argument("--job", default=str(ROOT / "configs" / "cartpole_ppo.toml"))
    ap.add_argument("--arms", nargs="+", choices=list(ARMS), default=["numpy", "torch"],
                    help="samplers' inference to launch with, alternating")
    args = ap.parse_args()
    got: dict[str, list[float]] = {a: [] for a in args.arms}
    updates: dict[str, list[float]] = {a: [] for a in args.arms}
    floor: list[float] = []
    print(f"{'launch':>6}{'samplers':>10}{'import torch s':>16}{'first env step s':>18}"
          f"{'learner up s':>14}{'first update s':>16}")
    nan, inf = float("nan"), float("inf")
    for i in range(args.launches):
        for arm in args.arms:
            floor.append(bare_torch())
            s, learner, update = one(args.job, arm)
            got[arm].append(s if s is not None else inf)
            updates[arm].append(update if update is not None else inf)
            print(f"{i:>6}{arm:>10}{floor[-1]:>16.2f}{s if s is not None else nan:>18.2f}"
                  f"{learner if learner is not None else nan:>14.2f}"
                  f"{update if update is not None else nan:>16.2f}", flush=True)
    med = {a: statistics.median(v) for a, v in got.items()}
    bare = statistics.median(floor)
    print("\nmedian first env step: " + ", ".join(f"{a} {m:.2f} s" for a, m in med.items()))
    print(f"median bare import torch: {bare:.2f} s")
    for a, v in updates.items():
        u = statistics.median(v)
        print(f"median first update ({a}): {u:.2f} s, {u - bare:+.2f} s past the floor")
    for other in ("torch", "exec", "late"):
        if "numpy" in med and other in med:
            up = statistics.median(updates["numpy"]) / statistics.median(updates[other])
            print(f"ratio numpy/{other}: first env step {med['numpy'] / med[other]:.2f}, "
                  f"first update {up:.2f}")

if __name__ == "__main__":
    main()
