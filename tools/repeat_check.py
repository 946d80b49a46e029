#!/usr/bin/env python
"""Two runs of a job with `experiment.deterministic = true` and the same seed,
compared: every checkpoint's tensors bit for bit and the evaluation curves; then
the same job once in the default mode, for the wall time the mode costs. With
`--hosts 2` every run is on two namespace hosts (root; tools/hosts/netns.py):
the registry, learner, shard and evaluator on one, the samplers on the other.

    python tools/repeat_check.py                       # the main job on this host
    python tools/repeat_check.py --hosts 2 --steps 30000
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: tools.*
from tools.harness import ROOT, events, start  # noqa: E402

JOB = ROOT / "configs" / "cartpole_ppo.toml"


def flat(x: Any, pre: str = "") -> dict[str, Any]:
    """A checkpoint's leaves by path (tensors, numbers, strings)."""
    items = x.items() if isinstance(x, dict) else enumerate(x) \
        if isinstance(x, list | tuple) else None
    if items is None:
        return {pre.rstrip("."): x}
    out: dict[str, Any] = {}
    for k, v in items:
        out.update(flat(v, f"{pre}{k}."))
    return out


def same_checkpoints(a: Path, b: Path) -> list[str]:
    """One line per checkpoint of run `a`: equal bit for bit to run `b`'s, or not."""
    import torch

    lines = []
    for f in sorted((a / "checkpoints").glob("*.pt")):
        g = b / "checkpoints" / f.name
        if not g.exists():
            lines.append(f"{f.name}: missing in the second run")
            continue
        # the job's text is left out: the runs differ in launch.port_range alone
        x = {k: v for k, v in flat(torch.load(f, weights_only=True, map_location="cpu"))
             .items() if k != "job"}
        y = {k: v for k, v in flat(torch.load(g, weights_only=True, map_location="cpu"))
             .items() if k != "job"}
        differ = [k for k in x if k not in y or (
            torch.equal(x[k], y[k]) if torch.is_tensor(x[k]) else x[k] == y[k]) is False]
        n = sum(1 for v in x.values() if torch.is_tensor(v))
        lines.append(f"{f.name}: {n} tensors and {len(x) - n} other values, "
                     + ("bit for bit equal" if not differ and
                                                    x.keys() == y.keys()
                                                    else f"DIFFER at {differ[:5]}"))
    return lines


def curve(run: Path) -> list[tuple[int, int, float]]:
    return [(e["env_steps"], e["version"], e["eval/return_mean"])
            for e in events(run / "logs" / "evaluator-0.jsonl") if e.get("event") == "evaluated"]


def launch(prefix: list[str], spec: str, run: Path, sets: list[str]) -> float:
    """verl-launch SPEC JOB (inside `prefix`: a namespace host); its wall seconds."""
    t0 = time.monotonic()
    p = start(JOB, run, sets, hosts=spec, capture=True, wrap=prefix)
    _, err = p.communicate(timeout=1800)
    if p.returncode not in (0, 3):
        sys.exit(f"run {run} failed ({p.returncode}): {err[-2000:]}")
    return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hosts", type=int, choices=(1, 2), default=1)
    ap.add_argument("--default-runs", type=int, default=3,
                    help="runs in the default mode, for its wall time (it varies)")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="repeat-check-"))
    sets = [f"training.total_timesteps={a.steps}", f"experiment.seed={a.seed}",
            "checkpoint.interval_steps=10000"]
    lab = None
    prefix: list[str] = []
    spec = "local"
    if a.hosts == 2:
        from tools.hosts.netns import Lab

        lab = Lab(tmp / "lab", hosts=2).__enter__()
        hf = tmp / "hosts.txt"
        hf.write_text(f"{lab.addresses[0]} roles=registry,learner,replay,evaluator\n"
                      f"{lab.addresses[1]} roles=sampler\n")
        sets += lab.job_overrides(sys.executable, str(ROOT))
        prefix, spec = lab.wrap(0), str(hf)
    try:
        walls = {}
        runs = [("det-1", ["experiment.deterministic=true"]),
                ("det-2", ["experiment.deterministic=true"])]
        runs += [(f"default-{i + 1}", []) for i in range(a.default_runs)]
        for name, extra in runs:
            walls[name] = launch(prefix, spec, tmp / name, sets + extra)
    finally:
        if lab is not None:
            lab.__exit__(None, None, None)
    where = "one host" if a.hosts == 1 else "two namespace hosts (samplers on the second)"
    print(f"configs/cartpole_ppo.toml, seed {a.seed}, {a.steps:,} env steps, {where}")
    print("\ncheckpoints, deterministic run 1 against run 2:")
    for line in same_checkpoints(tmp / "det-1", tmp / "det-2"):
        print("  " + line)
    c1, c2, c0 = curve(tmp / "det-1"), curve(tmp / "det-2"), curve(tmp / "default-1")
    print(f"\nevaluation curves (env steps, version, return): "
          f"{'the same' if c1 == c2 else 'DIFFERENT'}")
    print(f"  run 1: {c1}\n  run 2: {c2}")
    import statistics

    det = [walls["det-1"], walls["det-2"]]
    default = [w for k, w in walls.items() if k.startswith("default")]
    print(f"\nwall time (the launcher, start to end): deterministic "
          f"{', '.join(f'{w:.1f}' for w in det)} s; default "
          f"{', '.join(f'{w:.1f}' for w in default)} s; medians "
          f"{statistics.median(det):.1f} s against {statistics.median(default):.1f} s "
          f"({statistics.median(det) / statistics.median(default):.2f}x)")
    print(f"  default mode's curve: {c0}")
    (tmp / "repeat.json").write_text(json.dumps({"walls": walls, "curves": [c1, c2, c0]}))
    print(f"\nrun folders: {tmp}")


if __name__ == "__main__":
    main()
