#!/usr/bin/env python
"""The main job on a real two-node Ray cluster, a node lost mid-run (the `ray`
extra; root, for the network namespaces), in one invocation:

1. `tools/hosts/ray_cluster.py` starts a head (8 CPUs) and a worker node (4
   CPUs) with `ray start`, each in a network namespace of its own;
2. `verl-launch ray:HEAD:PORT configs/cartpole_ppo.toml --dry-run` prints the
   placement on the two nodes;
3. the job runs from the head's namespace; once the worker node's samplers
   sample, every process of that node is killed and its namespace removed;
4. printed: when the node went, which roles came back where, the job's end,
   its evaluations against 475, and the launcher's last lines.

    python tools/ray_check.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: tools.*
from tools.harness import ROOT, events, poll  # noqa: E402
from tools.hosts.ray_cluster import RayCluster, unavailable  # noqa: E402

JOB = ROOT / "configs" / "cartpole_ppo.toml"
TARGET = 475.0


def sampling(run: Path, member: str) -> bool:
    return any(e.get("event") == "sampling_started"
               for e in events(run / "logs" / f"{member}.jsonl"))


def evaluated(run: Path) -> bool:
    return any(e.get("event") == "evaluated"
               for e in events(run / "logs" / "evaluator-0.jsonl"))


def main() -> None:
    if why := unavailable():
        sys.exit(f"error: {why}")
    run = Path(tempfile.mkdtemp(prefix="ray-check-")) / "run"
    with RayCluster(workers=1, cpus=[8, 4]) as c:
        print(f"cluster: head {c.addresses[0]} (8 CPUs), worker {c.addresses[1]} (4 CPUs), "
              f"Ray at {c.address}\n")
        argv = [sys.executable, "-m", "launcher", c.spec, str(JOB), "--run-dir", str(run)]
        dry = subprocess.run([*c.wrap(0), *argv, "--dry-run"], capture_output=True,
                             text=True, cwd=ROOT, timeout=300)
        print("$ verl-launch", c.spec, "configs/cartpole_ppo.toml --dry-run   (the plan)")
        print("\n".join(dry.stdout.split("\n\ncommands")[0].splitlines()), "\n")
        rows = [ln.split() for ln in dry.stdout.splitlines() if ln[:1].isalpha()]
        on_worker = [r[0] for r in rows if len(r) == 4 and r[3] == c.addresses[1]]
        out = run.parent / "launcher.out"
        t0 = time.monotonic()
        with open(out, "w") as f:
            proc = subprocess.Popen([*c.wrap(0), *argv], stdout=f, stderr=subprocess.STDOUT,
                                    cwd=ROOT)
            # mid-run: the worker's samplers sample and the evaluator has scored the
            # first policy (CartPole is learnt in seconds: later, 475 would come first)
            if not poll(lambda: all(sampling(run, m) for m in on_worker) and evaluated(run),
                        300):
                proc.kill()
                sys.exit(f"the worker's roles {on_worker} never sampled, or nothing was "
                         f"evaluated")
            wall_lost = time.time()
            lost_at = time.monotonic() - t0
            killed = c.lose(1)
            print(f"worker node {c.addresses[1]} lost at {lost_at:.1f}s: {len(killed)} "
                  f"processes killed, its namespace removed (roles there: "
                  f"{', '.join(on_worker)})")
            rc = proc.wait(timeout=900)
    evs = events(run / "logs" / "launcher.jsonl")
    for e in evs:
        if e.get("event") == "role_moved":
            print(f"  {e['member']} ({e['member_role']}) moved to {e['host']} at "
                  f"{e['ts'] - evs[0]['ts']:.1f}s of the job")
    summary = json.loads((run / "summary.json").read_text())
    evals = [e for m in ("evaluator-0",) for e in events(run / "logs" / f"{m}.jsonl")
             if e.get("event") == "evaluated"]
    first = next((e for e in evals if e.get("eval/return_mean", 0) >= TARGET), None)
    print(f"\nexit code {rc}, status {summary['status']}, {summary['env_steps']:,} env steps "
          f"in {summary['wall_s']:.1f}s")
    print(f"best evaluation {summary['best_eval_return']}, final "
          f"{summary['final_eval_return']}; first at or above {TARGET:g}: "
          + (f"{first['eval/return_mean']} at {first.get('env_steps', '?'):,} env steps, "
             f"{first['ts'] - wall_lost:+.1f}s from the node's loss" if first else "never"))
    before = [e["eval/return_mean"] for e in evals if e["ts"] < wall_lost]
    print(f"evaluations before the loss: {before}")
    print(f"restarts: {summary.get('restarts', {})}")
    print("\nthe launcher's terminal, last lines:")
    print("\n".join(out.read_text().strip().splitlines()[-16:]))
    print(f"\nrun folder: {run}")


if __name__ == "__main__":
    main()
