#!/usr/bin/env python
"""Bounded memory under overload: CartPole PPO with the learner slowed on purpose
(`training.update_delay_s`), so the samplers could produce many times what it
consumes, for --seconds from the moment the replay shard is first full (the
overload is then certain, however fast each process runs). The RSS of every
role is sampled each second from /proc; printed per role: RSS after warm-up, at
the end, and the growth; then what the overload must cause (the shard full, the
shard not reading and the samplers blocked on sending, both counted in seconds)
and whether any role died.

    python tools/faults/soak.py [--seconds 600] [--max-growth-pct 5] [--max-growth-mb 50]

With `--chaos` it is the long run under fire instead (tools/faults/chaos_soak.py,
root: namespace hosts, a fault every minute): its options apply.

    sudo python tools/faults/soak.py --chaos --minutes 30 [--job configs/cartpole_dapo.toml]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: tools.*
from tools.harness import ROOT, events, rss_mb, start, stop  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=600.0)
    ap.add_argument("--warmup", type=float, default=None,
                    help="seconds after training starts (default: 20%% of the run)")
    ap.add_argument("--delay", type=float, default=0.3,
                    help="seconds the learner sleeps after each update")
    ap.add_argument("--max-growth-pct", type=float, default=5.0)
    ap.add_argument("--max-growth-mb", type=float, default=None,
                    help="an absolute bound instead (short runs)")
    args = ap.parse_args()
    warmup = args.warmup if args.warmup is not None else 0.2 * args.seconds
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        job = start(ROOT / "configs/cartpole_ppo.toml", run, [
            "training.total_timesteps=1000000000", f"training.update_delay_s={args.delay}",
            "logging.interval_s=2.0",
            # samplers never wait for params and the learner drops nothing as stale:
            # only the full shard holds the samplers back
            "sampling.max_fragments_ahead=1000000000", "sampling.lead_updates=0",
            "training.max_policy_lag=1000000000",
            "launch.evaluators=0"])
        try:
            return soak(run, job, args, warmup)
        finally:
            stop(job)


def soak(run: Path, job: subprocess.Popen, args, warmup: float) -> int:
    t0 = time.monotonic()
    started = None  # warm-up counts from the moment the shard is first full
    full_ts = None  # ... in the logs' clock
    pids: dict[str, int] = {}
    series: dict[str, list[tuple[float, float]]] = {}
    while (time.monotonic() - t0 < args.seconds + (started or 0.0)
           and job.poll() is None):
        for e in events(run / "logs" / "launcher.jsonl"):
            if e.get("event") in ("role_started", "role_restarted") and "pid" in e:
                pids[e["member"]] = e["pid"]
        full = [e for e in events(run / "logs" / "replay-0.jsonl") if _full(e)]
        if started is None and full:
            started, full_ts = time.monotonic() - t0, full[0]["ts"]
            print(f"shard full after {started:.1f} s", flush=True)
        now = time.monotonic() - t0
        for m, pid in pids.items():
            v = rss_mb(pid)
            if v is not None:
                series.setdefault(m, []).append((now, v))
        time.sleep(1.0)
    print(f"{'role':<14}{'after warm-up MB':>18}{'end MB':>10}{'growth MB':>11}{'growth %':>10}")
    worst_pct = worst_mb = 0.0
    for m in sorted(series):
        pts = [v for t, v in series[m] if started is not None and t >= started + warmup]
        if len(pts) < 2:
            continue
        start, end = pts[0], pts[-1]
        g = end - start
        worst_mb, worst_pct = max(worst_mb, g), max(worst_pct, 100 * g / start)
        print(f"{m:<14}{start:>18.1f}{end:>10.1f}{g:>+11.1f}{100 * g / start:>+10.1f}")
    waits = [e["sampler/backpressure_wait_frac"] for p in (run / "logs").glob("sampler-*.jsonl")
             for e in events(p) if e.get("event") == "metrics"
             and isinstance(e.get("sampler/backpressure_wait_frac"), int | float)]
    waited = sum(_grew(p, "sampler/backpressure_wait_s", full_ts)
                 for p in (run / "logs").glob("sampler-*.jsonl"))
    blocked = _grew(run / "logs" / "replay-0.jsonl", "replay/blocked_s", full_ts)
    rate = {k: [e[k] for e in events(run / "logs" / "learner-0.jsonl")
                if e.get("event") == "metrics" and k in e][-5:]
            for k in ("learner/env_steps_per_s", "learner/updates_per_s")}
    died = [e["member"] for e in events(run / "logs" / "launcher.jsonl")
            if e.get("event") == "role_died"]
    tail = waits[len(waits) // 2:] or [0.0]
    print(f"\nshard full: {'yes' if started is not None else 'never'}; after it: shard "
          f"not reading {blocked:.1f} s, samplers blocked sending {waited:.1f} s in all")
    print(f"samplers' backpressure wait fraction (second half): mean "
          f"{sum(tail) / len(tail):.2f}; learner env steps/s (last) "
          f"{rate['learner/env_steps_per_s']}; roles died: {died or 'none'}")
    bound_ok = (worst_mb <= args.max_growth_mb if args.max_growth_mb is not None
                else worst_pct <= args.max_growth_pct)
    print(f"largest growth after warm-up: {worst_mb:+.1f} MB, {worst_pct:+.1f}% "
          f"({'within' if bound_ok else 'OVER'} the bound)")
    return 0 if bound_ok and not died and started is not None else 1


def _full(e: dict) -> bool:
    size, cap = e.get("replay/size"), e.get("replay/capacity")
    return e.get("event") == "metrics" and isinstance(size, int) and isinstance(cap, int) \
        and size >= cap


def _grew(log: Path, key: str, since: float | None) -> float:
    """How much a cumulative metric grew in a role's log after `since` (log time)."""
    if since is None:
        return 0.0
    after = [e[key] for e in events(log) if e.get("event") == "metrics"
             and isinstance(e.get(key), int | float) and e.get("ts", 0.0) >= since]
    return float(after[-1] - after[0]) if len(after) > 1 else 0.0


if __name__ == "__main__":
    if "--chaos" in sys.argv[1:]:
        sys.argv.remove("--chaos")
        from tools.faults import chaos_soak

        sys.exit(chaos_soak.main())
    sys.exit(main())
