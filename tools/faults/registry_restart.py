#!/usr/bin/env python
"""Registry restarts: start a job, kill -9 its registry once training runs, and
check the learners still publish new param versions 8-20 s later (the launcher
restarts the registry; every member registers again). Repeats on fresh jobs and
prints, per run, the version before the kill and the versions seen after, and
how many reconnects to a shard the restart caused.

    python tools/faults/registry_restart.py [JOB] [--runs 6]
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: tools.*
from tools.faults.chaos import Run, wait  # noqa: E402
from tools.harness import ROOT, events  # noqa: E402


def one(job: str, tmp: Path) -> tuple[bool, int, str]:
    r = Run(job, tmp / "run", [])
    try:
        if not wait(lambda: any(v > 0 for _, v in r.progress()), 180):
            return False, 0, "never started training"
        time.sleep(3)
        os.kill(r.pid("registry"), signal.SIGKILL)
        t_kill = time.time()
        time.sleep(20)
        progress = r.progress()  # reads every learner log: once
        before = max((v for t, v in progress if t < t_kill), default=0)
        late = sorted({v for t, v in progress if t_kill + 8 < t < t_kill + 20})
        reconnects = sum(1 for p in (r.run / "logs").glob("*.jsonl") for e in events(p)
                         if e.get("event") == "shard_disconnected" and e["ts"] > t_kill)
        moving = len(late) > 1
        return moving, reconnects, (f"version {before} at the kill; 8-20 s later "
                        f"{late[0] if late else '-'}..{late[-1] if late else '-'}; "
                        f"shard reconnects {reconnects}")
    finally:
        r.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("job", nargs="?", default=str(ROOT / "configs" / "cartpole_ppo.toml"))
    ap.add_argument("--runs", type=int, default=6)
    args = ap.parse_args()
    stalls = churned = 0
    for i in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            ok, reconnects, what = one(args.job, Path(tmp))
        stalls += not ok
        churned += reconnects > 0
        print(f"run {i}: {'training' if ok else 'STALLED'}: {what}", flush=True)
    print(f"\nafter a registry restart: stalled in {stalls} of {args.runs} runs; "
          f"shard reconnects in {churned} of {args.runs}")
    return 1 if stalls or churned else 0


if __name__ == "__main__":
    sys.exit(main())
