#!/usr/bin/env python
"""The network and the policy loss of docs/guides/extending.md, in a folder outside
the package, on the shipped CartPole PPO job with only [algorithm] changed,
beside the shipped job itself: env steps and wall seconds to an evaluation of
475, per seed.

    python tools/bench/extending.py [--seeds 0 1 2] [--target 475]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: tools.*
from tools.harness import ROOT, free_ports, time_to_return  # noqa: E402

GUIDE = ROOT / "docs" / "guides" / "extending.md"
OWN = ['algorithm.policy.network="mypkg.nets:two_towers"',
       'algorithm.params.policy_loss="mypkg.losses:clipped_pulled_back"']


def write_modules(folder: Path) -> None:
    (folder / "mypkg").mkdir()
    (folder / "mypkg" / "__init__.py").write_text("")
    for text, path in re.findall(r"^```python\n(# (mypkg/\S+)\n.*?)^```", GUIDE.read_text(),
                                 re.S | re.M):
        (folder / path).write_text(text)


def run(folder: Path, run_dir: Path, seed: int, target: float, extra: list[str]
        ) -> tuple[int | None, float | None]:
    """(env steps, wall seconds from the launcher's start) to the target, or Nones."""
    lo, hi = free_ports()
    sets = [f"experiment.seed={seed}", f"evaluation.stop_at_return={target}",
            f"launch.port_range=[{lo}, {hi}]", *extra]
    t0 = time.time()
    subprocess.run([sys.executable, "-m", "launcher", "local",
                    str(ROOT / "configs" / "cartpole_ppo.toml"), "--run-dir", str(run_dir),
                    *[f"--set={s}" for s in sets]], cwd=folder, check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    ts, steps = time_to_return(run_dir, target)
    return steps, (ts - t0 if ts is not None else None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--target", type=float, default=475.0)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        write_modules(folder)
        rows = {"own network + own loss": OWN, "shipped": []}
        got: dict[str, list[tuple[int | None, float | None]]] = {k: [] for k in rows}
        print(f"{'arm':<24} {'seed':>4} {'env steps':>10} {'wall s':>7}")
        for seed in a.seeds:
            for arm, extra in rows.items():
                steps, wall = run(folder, folder / f"{arm[:3]}-{seed}", seed, a.target, extra)
                got[arm].append((steps, wall))
                print(f"{arm:<24} {seed:>4} {steps if steps else '> budget':>10} "
                      f"{f'{wall:.1f}' if wall else '-':>7}", flush=True)
        for arm, results in got.items():
            ok = [r for r in results if r[0] is not None]
            if ok:
                print(f"{arm}: reached {a.target:g} on {len(ok)}/{len(results)} seeds; mean "
                      f"{statistics.mean(r[0] for r in ok):,.0f} env steps, "
                      f"{statistics.mean(r[1] for r in ok):.1f} s")
            else:
                print(f"{arm}: never reached {a.target:g}")


if __name__ == "__main__":
    main()
