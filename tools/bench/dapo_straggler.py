#!/usr/bin/env python
"""A straggler among DAPO's peers: the shipped CartPole job (4 peers) with
peer-3 held to a quarter of its speed for 20 s mid-run (stopped 150 ms of every
200 ms with SIGSTOP/SIGCONT), in the asynchronous default and in gradient
rounds, one after the other.

Printed per mode: the other peers' updates per second in the 15 s before the
slow spell and during it (the ratio is what the straggler costs them), the slow
peer's rate before, during and after, and when each peer first reached the
target. The job runs a fixed budget (no early stop), so the spell falls inside
it whatever the machine's speed.

    python tools/bench/dapo_straggler.py [--seed 0] [--modes async gradients]
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: tools.*
from tools.harness import ROOT, events, poll, start  # noqa: E402

JOB = ROOT / "configs" / "cartpole_dapo.toml"
MODES = {"async": [], "gradients": ['gossip.mixing="gradients"', "gossip.update_interval=5",
                                    "gossip.sync_interval=10"]}
TARGET = 475.0
SLOW, SPELL_S, BEFORE_S = 3, 20.0, 15.0


def _throttle(pid: int, until: float) -> None:
    """A quarter of the CPU time: stopped 150 ms of every 200 ms."""
    import os

    while time.time() < until:
        try:
            os.kill(pid, signal.SIGSTOP)
            time.sleep(0.15)
            os.kill(pid, signal.SIGCONT)
            time.sleep(0.05)
        except ProcessLookupError:
            return


def _series(logs: Path, i: int) -> list[tuple[float, int]]:
    return [(e["ts"], int(e["peer/updates"])) for e in events(logs / f"peer-{i}.jsonl")
            if e.get("event") == "metrics" and "peer/updates" in e]


def _rate(series: list[tuple[float, int]], t0: float, t1: float) -> float:
    """Updates a second between the metrics events nearest t0 and t1."""
    inside = [p for p in series if t0 <= p[0] <= t1]
    if len(inside) < 2:
        return float("nan")
    (a, ua), (b, ub) = inside[0], inside[-1]
    return (ub - ua) / (b - a) if b > a else float("nan")


def run(mode: str, seed: int, budget: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        p = start(JOB, run_dir, [*MODES[mode], f"experiment.seed={seed}",
                                 f"training.total_timesteps={budget}", "logging.interval_s=0.5",
                                 "evaluation.interval_steps=4000"])
        logs = run_dir / "logs"
        try:
            ok = poll(lambda: all(_series(logs, i) and _series(logs, i)[-1][1] >= 10
                                  for i in range(4)), 300)
            if not ok:
                raise SystemExit(f"{mode}: the peers did not start updating")
            time.sleep(BEFORE_S)
            pid = [e["pid"] for e in events(logs / "launcher.jsonl")
                   if e.get("event") == "role_started" and e.get("member") == f"peer-{SLOW}"][-1]
            t0 = time.time()
            th = threading.Thread(target=_throttle, args=(pid, t0 + SPELL_S))
            th.start()
            th.join()
            t1 = time.time()
            p.wait(1800)
        finally:
            if p.poll() is None:
                p.kill()
        series = {i: _series(logs, i) for i in range(4)}
        evs = [e for e in events(logs / "evaluator-0.jsonl") if e.get("event") == "evaluated"]
    start_ts = min(s[0][0] for s in series.values())
    reached = {}
    for e in evs:
        if e["eval/return_mean"] >= TARGET and e["member"] not in reached:
            reached[e["member"]] = round(e["ts"] - start_ts, 1)
    others_before = [_rate(series[i], t0 - BEFORE_S, t0) for i in range(4) if i != SLOW]
    others_during = [_rate(series[i], t0, t1) for i in range(4) if i != SLOW]
    return {"mode": mode, "rc": p.returncode,
            "others_before": sum(others_before) / 3, "others_during": sum(others_during) / 3,
            "slow_before": _rate(series[SLOW], t0 - BEFORE_S, t0),
            "slow_during": _rate(series[SLOW], t0, t1),
            "slow_after": _rate(series[SLOW], t1, t1 + BEFORE_S),
            "spell": (round(t0 - start_ts, 1), round(t1 - start_ts, 1)), "reached": reached}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--modes", nargs="+", choices=sorted(MODES), default=["async", "gradients"])
    ap.add_argument("--budget", type=int, default=160_000, help="the group's env steps")
    args = ap.parse_args(argv)
    print(f"peer-{SLOW} at a quarter of its speed for {SPELL_S:.0f} s; updates per second\n")
    print("| mode | others before | others during | ratio | slow before | slow during | "
          "slow after | spell (s from start) | first reached 475 (s from start) | rc |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for mode in args.modes:
        r = run(mode, args.seed, args.budget)
        reached = ", ".join(f"{k} {v}" for k, v in sorted(r["reached"].items())) or "none"
        print(f"| {mode} | {r['others_before']:.2f} | {r['others_during']:.2f} | "
              f"{r['others_during'] / r['others_before']:.2f} | {r['slow_before']:.2f} | "
              f"{r['slow_during']:.2f} | {r['slow_after']:.2f} | {r['spell'][0]}-{r['spell'][1]} "
              f"| {reached} | {r['rc']} |", flush=True)


if __name__ == "__main__":
    main()
