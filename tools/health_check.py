#!/usr/bin/env python
"""Every job of configs/ at a short budget, and the health warnings each raised
(`logging.health`): a healthy run should raise none. Each job runs through the
launcher on this host, with its env-step budget cut to `--steps` and a wall
limit of `--seconds` (then it is interrupted: what it said so far counts).

    python tools/health_check.py                 # all of configs/
    python tools/health_check.py --steps 30000 --seconds 90 cartpole_ppo lunarlander_ppo
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: tools.*
from tools.harness import ROOT, events, start, stop  # noqa: E402


def run(job: Path, steps: int, seconds: float, out: Path) -> dict[str, object]:
    from verl_zmq.config import ConfigError, load_job

    try:
        total = load_job(job).training.total_timesteps
    except ConfigError as e:
        return {"job": job.stem, "skipped": str(e).splitlines()[0][:80]}
    t0 = time.monotonic()
    proc = start(job, out, [f"training.total_timesteps={min(total, steps)}"], capture=True)
    try:
        _, err = proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        stop(proc, grace_s=60)  # interrupted: what it said so far counts
        _, err = proc.communicate()
    warned: dict[str, list[str]] = {}
    updates = 0
    for log in sorted((out / "logs").glob("*.jsonl")):
        for e in events(log):
            ev = str(e.get("event", ""))
            if ev.startswith("health_") or ev == "critic_flat":
                warned.setdefault(ev, []).append(str(e.get("id", "?")))
            updates = max(updates, int(e.get("learner/updates", e.get("peer/updates", 0)) or 0))
    try:
        summary = json.loads((out / "summary.json").read_text())
    except (OSError, ValueError):
        summary = {}
    return {"job": job.stem, "rc": proc.returncode, "wall_s": round(time.monotonic() - t0),
            "env_steps": summary.get("env_steps", 0), "updates": updates,
            "status": summary.get("status", "?"), "warnings": warned,
            "error": "" if proc.returncode in (0, 3, 130) else err.strip()[-200:]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("jobs", nargs="*", help="config names (default: every configs/*.toml)")
    ap.add_argument("--steps", type=int, default=30_000)
    ap.add_argument("--seconds", type=float, default=90.0)
    a = ap.parse_args()
    jobs = [ROOT / "configs" / f"{j.removesuffix('.toml')}.toml" for j in a.jobs] or \
        sorted((ROOT / "configs").glob("*.toml"))
    tmp = Path(tempfile.mkdtemp(prefix="health-check-"))
    rows = []
    print(f"{'job':26} {'status':12} {'env steps':>10} {'updates':>8}  health warnings")
    for job in jobs:
        r = run(job, a.steps, a.seconds, tmp / job.stem)
        rows.append(r)
        if "skipped" in r:
            print(f"{r['job']:26} skipped: {r['skipped']}")
            continue
        w = r["warnings"]
        said = ", ".join(f"{k} ({len(set(v))} roles)" for k, v in w.items()) or "none"
        print(f"{r['job']:26} {r['status']:12} {r['env_steps']:>10,} {r['updates']:>8}  "
              f"{said}{'  ' + r['error'] if r['error'] else ''}", flush=True)
    (tmp / "health.json").write_text(json.dumps(rows, indent=1))
    print(f"\n{sum(1 for r in rows if r.get('warnings'))} of {len(rows)} jobs raised a "
          f"warning; details: {tmp / 'health.json'}")


if __name__ == "__main__":
    main()
