#!/usr/bin/env python
"""Faults beyond a killed process, on the main job (configs/cartpole_ppo.toml),
each reported as: what happened, the time to detect, the time to recover (or to
stop), and whether the job ended as it should.

- `host-loss`: samplers on a second host, a network namespace (tools/hosts/netns.py),
  which crashes (every process in it killed, its link down) and boots 5 s later:
  the job goes on, probes the host with backoff, restarts its samplers when it
  answers, reaches its target, and names the lost host in its summary.
- `partition`: the same two namespace hosts cut off from each other for longer
  than heartbeat x liveness, then healed: the registry drops the unreachable
  samplers, the rest carry on, the samplers register again and ship experience
  after the heal, the job reaches its target; fragments sent and received are
  counted, and nothing may be left running on either host.
- `disk-full`: the run folder on a small tmpfs (needs root to mount); once the
  learner has written a checkpoint, another process fills the disk. The job must
  keep going (roles lose their logs, checkpoints are skipped, none half-written),
  say ENOSPC with a path on stderr, and on SIGTERM stop within `launch.grace_s`
  plus a few seconds with exit code 130 and its summary (summary.json, or stdout).

The namespace scenarios need root, `ip netns`, sshd and the ssh client; each
reports `"ran": false` with the reason where they are missing.

    sudo python tools/faults/scenarios.py                 # every scenario
    sudo python tools/faults/scenarios.py --scenarios disk-full
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.harness import events, start  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
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


def _final(run: Path, prefix: str, key: str) -> float:
    """The sum over members named `prefix`* of `key` in each one's last metrics."""
    total = 0.0
    for path in (run / "logs").glob(f"{prefix}*.jsonl"):
        got = [e[key] for e in events(path) if e.get("event") == "metrics" and key in e]
        total += got[-1] if got else 0
    return total


def shipped(run: Path, member: str, after: float = 0.0) -> int:
    """The most fragments a sampler reported shipped in its metrics after `after`."""
    got = [e.get("sampler/fragments", 0) for e in events(run / "logs" / f"{member}.jsonl")
           if e.get("event") == "metrics" and e["ts"] > after]
    return max(got, default=0)


class _LabJob:
    """The main job on two namespace hosts (tools/hosts/netns.py): everything on host 0,
    samplers on both; the launcher runs inside host 0."""

    def __init__(self, lab, tmp: Path, name: str, overrides: list[str]):
        self.lab, self.run = lab, tmp / name
        hosts = tmp / f"hosts-{name}.txt"
        hosts.write_text(f"{lab.addresses[0]} roles=registry,learner,replay,evaluator,sampler\n"
                         f"{lab.addresses[1]} roles=sampler\n")
        self.p = start(JOB, self.run, [*lab.job_overrides(sys.executable, str(ROOT)),
                                       *overrides], hosts=str(hosts), capture=True,
                       wrap=lab.wrap(0))

    def log(self, who: str) -> list[dict]:
        return events(self.run / "logs" / f"{who}.jsonl")

    def first(self, who: str, event: str, after: float = 0.0, **match):
        """When `who` first logged `event` after `after` with fields equal to `match`."""
        got = [e["ts"] for e in self.log(who) if e.get("event") == event and e["ts"] > after
               and all(e.get(k) == v for k, v in match.items())]
        return got[0] if got else None

    def away(self) -> list[str]:
        """The members the launcher started on host 1."""
        there = self.lab.addresses[1]
        return sorted({e["member"] for e in self.log("launcher")
                       if e.get("event") == "role_started" and e.get("host") == there})

    def shipped(self, member: str, after: float = 0.0) -> int:
        return shipped(self.run, member, after)

    def training(self) -> bool:
        return bool(self.away()) and all(self.shipped(m) > 0 for m in self.away())

    def finish(self, timeout: float) -> tuple[int, str, dict]:
        try:
            _, err = self.p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.p.pid, signal.SIGKILL)
            _, err = self.p.communicate()
        try:
            summary = json.loads((self.run / "summary.json").read_text())
        except (OSError, ValueError):
            summary = {}
        return self.p.returncode, err, summary


def _lab(tmp: Path, scenario: str):
    from tools.hosts.netns import Lab, unavailable

    why = unavailable()
    return (None, {"scenario": scenario, "ran": False, "why": why}) if why else \
        (Lab(tmp / f"lab-{scenario}", hosts=2), None)


def host_loss(tmp: Path) -> dict:
    """Host 1 (a network namespace holding samplers) crashes: its link goes down and
    every process in it dies; 5 s later it boots (link up, a fresh sshd)."""
    lab, skipped = _lab(tmp, "host-loss")
    if skipped:
        return skipped
    with lab:
        job = _LabJob(lab, tmp, "hostloss", ["training.total_timesteps=100000"])
        _wait(job.training, 180)
        away, t_lost = job.away(), time.time()
        lab.lose(1)
        _wait(lambda: job.first("launcher", "host_lost"), 60)
        time.sleep(5)
        lab.boot(1)
        t_boot = time.time()
        _wait(lambda: job.first("launcher", "host_back"), 120)
        rc, err, summary = job.finish(600)
        lost, back = job.first("launcher", "host_lost"), job.first("launcher", "host_back")
        left = lab.strays(1)
    return {"scenario": "host-loss", "ran": True,
            "happened": f"host 1 ({lab.addresses[1]}: {', '.join(away)}) crashed: link down, "
                        "every process killed; it booted 5 s later",
            "detect_s": round(lost - t_lost, 2) if lost else None,
            "recover_s": round(back - t_boot, 2) if back else None,
            "exit_code": rc, "lost_hosts": summary.get("lost_hosts"),
            "best_eval_return": summary.get("best_eval_return"),
            "left_running_on_host_1": left,
            "ended_as_it_should": bool(rc == 0 and not left and summary.get("lost_hosts")
                                       and (summary.get("best_eval_return") or 0) >= 475)}


def partition(tmp: Path, cut_s: float = 0.0, budget: int = 100_000) -> dict:
    """Host 1 (samplers) and host 0 (everything else) cannot reach each other for
    `cut_s` (default: heartbeat x liveness + 4 s), then the link heals; the job runs
    `budget` env steps (no early stop: the target must not come before the cut)."""
    lab, skipped = _lab(tmp, "partition")
    if skipped:
        return skipped
    hb, liveness = 1.0, 3
    cut_s = cut_s or hb * liveness + 4
    with lab:
        job = _LabJob(lab, tmp, "partition", [f"training.total_timesteps={budget}",
                                               f"launch.heartbeat_interval_s={hb}",
                                               f"launch.heartbeat_liveness={liveness}"])
        _wait(job.training, 180)
        away = job.away()
        before = {m: job.shipped(m) for m in away}
        t_cut = time.time()
        lab.partition(1)
        dropped = lambda: [job.first("registry", "member_left", t_cut, member=m)  # noqa: E731
                           for m in away]
        # the cut lasts cut_s, or until the registry has dropped them if that is later
        # (a busy machine): what is measured is the rejoining of dropped members
        _wait(lambda: all(dropped()), cut_s + 20)
        time.sleep(max(0.0, cut_s - (time.time() - t_cut)))
        lab.heal(1)
        t_heal = time.time()
        back = lambda: [job.first("registry", "member_joined", t_heal, member=m)  # noqa: E731
                        for m in away]
        resumed = lambda: all(job.shipped(m, t_heal) > before[m] for m in away)  # noqa: E731
        _wait(lambda: all(back()) and resumed(), 120)
        t_resumed = time.time() if resumed() else None
        rc, err, summary = job.finish(600)
        left = lab.strays(1)
        sent = _final(job.run, "sampler-", "sampler/fragments")
        got = _final(job.run, "replay-", "replay/inserts") + \
            _final(job.run, "replay-", "replay/rejected")
    detected = [t for t in dropped() if t]
    rejoined = [t for t in back() if t]
    return {"scenario": "partition", "ran": True,
            "happened": f"host 1 ({lab.addresses[1]}: {', '.join(away)}) cut off from host 0 "
                        f"for {t_heal - t_cut:.1f} s (heartbeat {hb} s x liveness {liveness})",
            "liveness_s": hb * liveness,
            "detect_s": round(max(detected) - t_cut, 2) if len(detected) == len(away) else None,
            "rejoin_s": round(max(rejoined) - t_heal, 2) if len(rejoined) == len(away) else None,
            "recover_s": round(t_resumed - t_heal, 2) if t_resumed else None,
            "fragments_sent": int(sent), "fragments_received": int(got),
            "fragments_lost": int(sent - got), "exit_code": rc,
            "best_eval_return": summary.get("best_eval_return"),
            "left_running_on_host_1": left,
            "ended_as_it_should": bool(rc == 0 and t_resumed and not left
                                       and (summary.get("best_eval_return") or 0) >= 475)}


SCENARIOS = {"disk-full": disk_full, "host-loss": host_loss, "partition": partition}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenarios", nargs="+", choices=list(SCENARIOS), default=list(SCENARIOS))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="faults-") as d:
        for name in a.scenarios:
            print(json.dumps(SCENARIOS[name](Path(d)), indent=2), flush=True)


if __name__ == "__main__":
    main()
