#!/usr/bin/env python
"""Faults beyond a killed process, on the main job (configs/cartpole_ppo.toml),
each reported as: what happened, the time to detect, the time to recover (or to
stop), and whether the job ended as it should.

- `host-loss`: samplers on a second host whose roles are all killed and which
  stops answering for 5 s (see `host_loss`): the job goes on, probes the host
  with backoff, restarts its samplers when it answers, reaches its target, and
  names the lost host in its summary.
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

from tools._jobs import events, start  # noqa: E402
from tools.fake_ssh import lose_host  # noqa: E402

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


def host_loss(tmp: Path) -> dict:
    """Samplers on a second host (a loopback address reached through
    tools/fake_ssh.py, which fails as ssh does while the host is marked down):
    the host is lost with its roles, comes back 5 s later."""
    import os

    bin_dir, down = tmp / "bin", tmp / "down"
    bin_dir.mkdir()
    down.mkdir()
    (bin_dir / "ssh").symlink_to(ROOT / "tools" / "fake_ssh.py")
    os.environ["PATH"] = f"{bin_dir}:{os.environ['PATH']}"
    os.environ["FAKE_SSH_DOWN"] = str(down)
    hosts = tmp / "hosts.txt"
    hosts.write_text("127.0.0.2 roles=registry,learner,replay,evaluator,sampler\n"
                     "127.0.0.3 roles=sampler\n")
    run = tmp / "hostloss"
    p = start(JOB, run, [f'launch.python="{sys.executable}"', f'launch.workdir="{ROOT}"',
                         # no early stop: the target must not come before the loss does
                         "training.total_timesteps=100000"], hosts=str(hosts), capture=True)
    log = run / "logs" / "launcher.jsonl"

    def first(event: str):
        got = [e["ts"] for e in events(log) if e.get("event") == event]
        return got[0] if got else None

    _wait(lambda: any(e.get("event") == "metrics" and e.get("learner/env_steps", 0) > 0
                      for e in events(run / "logs" / "learner-0.jsonl")), 180)
    t_lost = time.time()
    lose_host(down, "127.0.0.3")
    _wait(lambda: first("host_lost"), 60)
    time.sleep(5)
    (down / "127.0.0.3").unlink()
    t_heal = time.time()
    _wait(lambda: first("host_back"), 120)
    out, err = p.communicate(timeout=600)
    summary = json.loads((run / "summary.json").read_text())
    lost, back = first("host_lost"), first("host_back")
    return {"scenario": "host-loss", "ran": True,
            "happened": "every role on 127.0.0.3 killed and the host unreachable for 5 s",
            "detect_s": round(lost - t_lost, 2) if lost else None,
            "recover_s": round(back - t_heal, 2) if back else None,
            "exit_code": p.returncode, "lost_hosts": summary.get("lost_hosts"),
            "best_eval_return": summary.get("best_eval_return"),
            "ended_as_it_should": bool(p.returncode == 0 and summary.get("lost_hosts")
                                       and (summary.get("best_eval_return") or 0) >= 475)}


SCENARIOS = {"disk-full": disk_full, "host-loss": host_loss}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenarios", nargs="+", choices=list(SCENARIOS), default=list(SCENARIOS))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="faults-") as d:
        for name in a.scenarios:
            print(json.dumps(SCENARIOS[name](Path(d)), indent=2), flush=True)


if __name__ == "__main__":
    main()
