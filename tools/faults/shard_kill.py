#!/usr/bin/env python
"""A replay shard killed with -9 comes back with its buffer: the DQN job, per
seed, filled to `--fill` transitions with snapshots every `--interval` s (the
default 30: the kill falls between two), its shard killed with -9; prints the
buffer's size in its last report before the kill (every 0.5 s) against what the
replacement restored (the snapshot, then the write-ahead log) and first reported.
Then the log's cost, one job after the other, on and off in turn `--repeats`
times (one run alone swings by more than the log costs: the samplers' insert
rate, which paces a DQN learner, differs from run to run): the learner's updates
per second over the same wall time with the log on (`replay.wal_interval_s`)
and off, their means and ratio, and the log's bytes per second of disk.

    python tools/faults/shard_kill.py [--seeds 0 1 2 3 4] [--fill 4000] [--repeats 3]
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


def kill(job: str, tmp: Path, fill: int, interval: float, seed: int) -> dict:
    r = Run(job, tmp / "run", [f"replay.snapshot_interval_s={interval}",
                               f"experiment.seed={seed}"])
    try:
        if not wait(lambda: sizes(r) and sizes(r)[-1][1] >= fill, 300):
            return {"error": f"the buffer did not reach {fill} within 300 s"}
        before = sizes(r)[-1][1]  # the last report (every 0.5 s) before the kill
        os.kill(r.pid("replay-0"), signal.SIGKILL)
        t_kill = time.time()
        restored = wait(lambda: [e for e in shard_events(r, "replay_restored")
                                 if e["ts"] > t_kill], 60)
        first = wait(lambda: [s for t, s in sizes(r) if t > (restored or [{}])[0].get("ts", 1e18)],
                     60)
        snaps = [s for s in shard_events(r, "replay_snapshot") if s["ts"] < t_kill]
        got = restored[0] if restored else {}
        return {"seed": seed, "size_at_kill": before,
                "last_snapshot_size": snaps[-1]["size"] if snaps else 0,
                "restored": got.get("size"), "from_snapshot": got.get("from_snapshot"),
                "from_log": got.get("logged_inserts"), "restore_s": got.get("seconds"),
                "first_report_after": first[0] if first else None}
    finally:
        r.stop()


def updates_per_s(job: str, tmp: Path, wal_s: float, seconds: float) -> dict:
    r = Run(job, tmp / "run", [f"replay.wal_interval_s={wal_s}"])
    try:
        def learner():
            return [e for e in events(r.run / "logs" / "learner-0.jsonl")
                    if e.get("event") == "metrics" and e.get("learner/updates", 0) > 0]
        if not wait(learner, 300):
            return {"error": "the learner never updated"}
        t0, u0 = learner()[-1]["ts"], learner()[-1]["learner/updates"]
        b0 = (shard_events(r, "metrics") or [{}])[-1].get("replay/wal_bytes", 0)
        time.sleep(seconds)
        last = learner()[-1]
        m = shard_events(r, "metrics")[-1]
        return {"updates_per_s": round((last["learner/updates"] - u0) / (last["ts"] - t0), 2),
                "wal_bytes_per_s": round((m.get("replay/wal_bytes", 0) - b0)
                                         / (m["ts"] - t0)),
                "inserts_per_s": m.get("replay/inserts_per_s")}
    finally:
        r.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--job", default=str(ROOT / "configs" / "cartpole_dqn.toml"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--fill", type=int, default=4000, help="transitions before the kill")
    ap.add_argument("--interval", type=float, default=30.0, help="snapshot interval (s)")
    ap.add_argument("--seconds", type=float, default=60.0, help="each cost run's window")
    ap.add_argument("--repeats", type=int, default=3, help="cost runs with the log on and off")
    args = ap.parse_args()
    kills = []
    for seed in args.seeds:
        with tempfile.TemporaryDirectory() as tmp:
            kills.append(kill(args.job, Path(tmp), args.fill, args.interval, seed))
        print(json.dumps({"kill": kills[-1]}), flush=True)
    cost: dict[str, list[dict]] = {"log_on": [], "log_off": []}
    for i in range(args.repeats):
        # alternate which goes first: a drift of the machine falls on both alike
        arms = (("log_on", 0.5), ("log_off", 0.0))
        for name, wal_s in arms if i % 2 == 0 else arms[::-1]:
            with tempfile.TemporaryDirectory() as tmp:
                cost[name].append(updates_per_s(args.job, Path(tmp), wal_s, args.seconds))
            print(json.dumps({name: cost[name][-1]}), flush=True)
    print("\n| seed | size at the kill | last snapshot | restored (snapshot + log) | "
          "restored / at kill | first report after |\n|---|---|---|---|---|---|")
    ok = True
    for k in kills:
        ratio = (k.get("restored") or 0) / max(k.get("size_at_kill") or 1, 1)
        ok &= ratio >= 0.98
        print(f"| {k.get('seed')} | {k.get('size_at_kill')} | {k.get('last_snapshot_size')} | "
              f"{k.get('restored')} ({k.get('from_snapshot')} + {k.get('from_log')}) | "
              f"{ratio:.3f} | {k.get('first_report_after')} |")
    def mean(name: str, key: str) -> float | None:
        vals = [c[key] for c in cost[name] if isinstance(c.get(key), int | float)]
        return sum(vals) / len(vals) if vals else None

    on, off = mean("log_on", "updates_per_s"), mean("log_off", "updates_per_s")
    if on and off:
        print(f"\nlearner updates/s with the log (every 0.5 s) / without, means of "
              f"{args.repeats}: {on:.1f} / {off:.1f} = {on / off:.3f}; the log wrote "
              f"{mean('log_on', 'wal_bytes_per_s'):.0f} B/s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
