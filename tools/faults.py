#!/usr/bin/env python
"""Faults beyond a killed process, on the main job (configs/cartpole_ppo.toml),
each reported as: what happened, the time to detect, the time to recover (or to
stop), and whether the job ended as it should.

- `disk-full`: the run folder on a small tmpfs (needs root to mount); once the
  learner has written a checkpoint, another process fills the disk. The job must
  keep going (roles lose their logs, checkpoints are skipped, none half-written),
  say ENOSPC with a path on stderr, and on SIGTERM stop within `launch.grace_s`
  plus a few seconds with exit code 130 and its summary (summary.json, or stdout).

    sudo python tools/faults.py                 # every scenario
    sudo python tools/faults.py --scenarios disk-full
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tools._jobs import start  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "configs" / "cartpole_ppo.toml"


def _wait(pred, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.2)
    return False


def disk_full(tmp: Path) -> dict:
    disk = tmp / "disk"
    disk.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)],
                       capture_output=True, text=True)
    if r.returncode:
        return {"scenario": "disk-full", "ran": False, "why": r.stderr.strip() or "mount failed"}
    run = disk / "run"
    try:
        p = start(JOB, run, ["training.total_timesteps=10000000", "checkpoint.interval_steps=2048",
                             "checkpoint.min_free_mb=0"], capture=True)
        _wait(lambda: list((run / "checkpoints").glob("step_*.pt")), 180)
        kept = sorted(x.name for x in (run / "checkpoints").glob("*.pt"))
        t_full = time.monotonic()
        with open(disk / "filler", "wb") as f:
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError:
                pass
        time.sleep(5)  # the job goes on against a full disk
        alive = p.poll() is None
        p.send_signal(signal.SIGTERM)
        t_term = time.monotonic()
        out, err = p.communicate(timeout=120)
        stop_s = time.monotonic() - t_term
        said = [line for line in err.splitlines() if "ENOSPC" in line and str(run) in line]
        whole = all(_loads(x) for x in (run / "checkpoints").glob("*.pt"))
        temporaries = sorted(x.name for x in (run / "checkpoints").glob(".*tmp*"))
        summary = "summary.json" if (run / "summary.json").exists() else \
            ("stdout" if '"status": "interrupted"' in out else "none")
        return {"scenario": "disk-full", "ran": True,
                "happened": f"disk filled, SIGTERM {round(t_term - t_full, 1)} s later; "
                            f"the job still running on the full disk then: {alive}",
                "detect_s": "said on the first failed write" if said else "not said",
                "stop_s": round(stop_s, 1), "exit_code": p.returncode,
                "enospc_line": said[0] if said else None, "summary": summary,
                "checkpoints_before": kept, "checkpoints_whole": whole,
                "temporaries_left": temporaries,
                "ended_as_it_should": bool(p.returncode == 130 and said and whole
                                           and summary != "none")}
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def _loads(path: Path) -> bool:
    import torch

    try:
        torch.load(path, weights_only=True)
        return True
    except Exception:  # a truncated or corrupt file
        return False


SCENARIOS = {"disk-full": disk_full}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenarios", nargs="+", choices=list(SCENARIOS), default=list(SCENARIOS))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="faults-") as d:
        for name in a.scenarios:
            print(json.dumps(SCENARIOS[name](Path(d)), indent=2), flush=True)


if __name__ == "__main__":
    main()
