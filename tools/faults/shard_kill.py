#!/usr/bin/env python
"""A replay shard killed with -9 comes back with its buffer: start the DQN job,
let replay-0 fill to `--fill` transitions and write a periodic snapshot, kill it
with -9, and print the buffer's size at the kill against what its replacement
restored and first reported. Then the snapshots' cost, one job after the other:
seconds and bytes per snapshot, and the learner's updates per second over the
same wall time with snapshots every `--interval` s and with snapshots off.

    python tools/faults/shard_kill.py [--job configs/cartpole_dqn.toml] [--fill 4000]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: tools.*
from tools.faults.chaos import Run, wait  # noqa: E402
from tools.harness import ROOT, events  # noqa: E402


def shard_events(r: Run, name: str) -> list[dict]:
    return [e for e in events(r.run / "logs" / "replay-0.jsonl") if e.get("event") == name]


def sizes(r: Run) -> list[tuple[float, int]]:
    return [(e["ts"], e["replay/size"]) for e in shard_events(r, "metrics")
            if "replay/size" in e]


def kill(job: str, tmp: Path, fill: int, interval: float) -> dict:
    r = Run(job, tmp / "run", [f"replay.snapshot_interval_s={interval}"])
    try:
        # a snapshot written after the buffer reached `fill`
        def ready():
            snaps = shard_events(r, "replay_snapshot")
            return snaps and snaps[-1]["size"] >= fill
        if not wait(ready, 300):
            return {"error": "no snapshot of the filled buffer within 300 s"}
        before = sizes(r)[-1][1]  # the last report (every 0.5 s) before the kill
        os.kill(r.pid("replay-0"), signal.SIGKILL)
        t_kill = time.time()
        restored = wait(lambda: [e for e in shard_events(r, "replay_restored")
                                 if e["ts"] > t_kill], 60)
        first = wait(lambda: [s for t, s in sizes(r) if t > (restored or [{}])[0].get("ts", 1e18)],
                     60)
        snaps = shard_events(r, "replay_snapshot")
        return {"size_at_kill": before,
                "last_snapshot_size": [s for s in snaps if s["ts"] < t_kill][-1]["size"],
                "restored": restored[0]["size"] if restored else None,
                "restore_s": restored[0]["seconds"] if restored else None,
                "first_report_after": first[0] if first else None}
    finally:
        r.stop()


def updates_per_s(job: str, tmp: Path, interval: float, seconds: float) -> dict:
    r = Run(job, tmp / "run", [f"replay.snapshot_interval_s={interval}"])
    try:
        def learner():
            return [e for e in events(r.run / "logs" / "learner-0.jsonl")
                    if e.get("event") == "metrics" and e.get("learner/updates", 0) > 0]
        if not wait(learner, 300):
            return {"error": "the learner never updated"}
        t0, u0 = learner()[-1]["ts"], learner()[-1]["learner/updates"]
        time.sleep(seconds)
        last = learner()[-1]
        snaps = shard_events(r, "replay_snapshot")
        return {"updates_per_s": round((last["learner/updates"] - u0) / (last["ts"] - t0), 2),
                "snapshots": len(snaps),
                "snapshot_s_mean": round(sum(s["seconds"] for s in snaps) / len(snaps), 4)
                if snaps else None,
                "snapshot_bytes_mean": int(sum(s["bytes"] for s in snaps) / len(snaps))
                if snaps else None,
                "buffer_size": snaps[-1]["size"] if snaps else None}
    finally:
        r.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--job", default=str(ROOT / "configs" / "cartpole_dqn.toml"))
    ap.add_argument("--fill", type=int, default=4000, help="transitions before the kill")
    ap.add_argument("--interval", type=float, default=5.0, help="snapshot interval (s)")
    ap.add_argument("--seconds", type=float, default=60.0, help="each cost run's window")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = kill(args.job, Path(tmp), args.fill, args.interval)
    print(json.dumps({"kill": out}), flush=True)
    cost = {}
    for name, interval in (("snapshots_on", args.interval), ("snapshots_off", 0.0)):
        with tempfile.TemporaryDirectory() as tmp:
            cost[name] = updates_per_s(args.job, Path(tmp), interval, args.seconds)
        print(json.dumps({name: cost[name]}), flush=True)
    on, off = cost["snapshots_on"].get("updates_per_s"), cost["snapshots_off"].get("updates_per_s")
    if on and off:
        print(f"learner updates/s with snapshots every {args.interval:g} s / without: "
              f"{on} / {off} = {on / off:.2f}")
    kept = out.get("restored")
    print(f"replay-0 held {out.get('size_at_kill')} at the kill; its replacement restored "
          f"{kept} (the last snapshot's) and first reported {out.get('first_report_after')}")
    return 0 if kept else 1


if __name__ == "__main__":
    sys.exit(main())
