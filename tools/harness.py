"""Helpers for the tools: run a job with verl-launch, read its logs."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


# where the blocks are drawn: below the launcher's default range (29500-29999, what
# a job without a port_range binds) and Linux's ephemeral one
PORTS = (20000, 29400)


def free_ports(width: int = 60) -> tuple[int, int]:
    """A free block below Linux's ephemeral range, so no outgoing connection takes it
    (the package's own, which `verl sweep` gives each trial's job). Under pytest-xdist
    each worker draws from its own share of the span: two jobs running at once in two
    workers never share a range (a registry's port taken by the other's job)."""
    from verl_zmq.ops.sweep import free_port_range

    lo, hi = PORTS
    n = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    i = int(worker[2:]) if worker[2:].isdigit() else 0
    share = (hi - lo) // max(n, 1)
    return free_port_range(width, lo + i * share, lo + (i + 1) * share)


def poll(pred, timeout: float, every: float = 0.25):
    """`pred()`'s first truthy value within `timeout` seconds, else None."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(every)
    return None


def http_ok(url: str, timeout_s: float = 2.0) -> bool:
    """Whether GET `url` answers 200 (a server's health endpoint, say)."""
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def events(path: Path) -> list[dict]:
    out = []
    try:
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
    except OSError:
        pass
    return out


def start(job: Path | str, run_dir: Path, overrides: list[str], hosts: str = "local",
          quiet: bool = True, capture: bool = False, wrap: list[str] = (),
          entry: str = "launcher") -> subprocess.Popen:
    """Start a whole job with verl-launch in its own session, ports from a free range;
    `capture`: its stdout and stderr as text pipes; `wrap`: a command prefix (such as
    `ip netns exec NAME`) the launcher runs under; `entry`: the module run
    (`launcher.cli`: the launcher without the torch zygote started ahead)."""
    lo, hi = free_ports()
    cmd = [*wrap, sys.executable, "-m", entry, hosts, str(job), "--run-dir", str(run_dir),
           "--set", f"launch.port_range=[{lo}, {hi}]", *[f"--set={o}" for o in overrides]]
    out = subprocess.PIPE if capture else subprocess.DEVNULL if quiet else None
    return subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=out, start_new_session=True,
                            text=capture)


def stop(p: subprocess.Popen, grace_s: float = 120.0) -> None:
    """Stop a job started with `start` as Ctrl-C would (SIGINT), then wait for it."""
    if p.poll() is None:
        p.send_signal(signal.SIGINT)
        try:
            p.wait(grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)


def launch(job: Path | str, run_dir: Path, overrides: list[str], hosts: str = "local",
           timeout: float | None = None, quiet: bool = True) -> tuple[int, float]:
    """Run a whole job; return (exit code, wall seconds of the launcher process)."""
    t0 = time.monotonic()
    p = start(job, run_dir, overrides, hosts, quiet)
    try:
        rc = p.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGINT)
        rc = p.wait(60)
    return rc, time.monotonic() - t0


def launch_warm_started(job: Path | str, run_dir: Path, overrides: list[str], folder: Path,
                        updates: int, batch: int, evaluations: int,
                        extra: tuple[str, ...] = (), timeout: float | None = None
                        ) -> tuple[int, float, list[dict]]:
    """A post-training job from the warm-start model in `folder` (with its own
    tokenizer) for `updates` updates of `batch` token slots, evaluated `evaluations`
    times along the way and never before (the warm start's own validation is the
    before; no return stops it early); `extra` overrides last. (exit code, wall
    seconds, the evaluator's `evaluated` events.)"""
    budget = updates * batch
    rc, wall = launch(job, run_dir, [*overrides, f"algorithm.policy.path={folder}",
                                     "algorithm.policy.tokenizer=",
                                     f"training.total_timesteps={budget}",
                                     f"evaluation.interval_steps={budget // evaluations}",
                                     "evaluation.stop_at_return=1.01",
                                     "evaluation.before_training=false", *extra],
                      timeout=timeout)
    evals = [e for e in events(run_dir / "logs" / "evaluator-0.jsonl")
             if e.get("event") == "evaluated"]
    return rc, wall, evals


def first_step_time(run_dir: Path) -> float | None:
    """When the first fragment was shipped: the first sampler metrics with env steps > 0,
    less its interval (the first env step happened within that interval)."""
    first = None
    for p in (run_dir / "logs").glob("sampler-*.jsonl"):
        for e in events(p):
            if e.get("event") == "role_started":
                first = e["ts"] if first is None else min(first, e["ts"])
                break
    return first


def time_to_return(run_dir: Path, target: float) -> tuple[float | None, int | None]:
    """(ts, env steps) of the first evaluation at or above target, else (None, None)."""
    for e in events(run_dir / "logs" / "evaluator-0.jsonl"):
        if e.get("event") == "evaluated" and e.get("eval/return_mean", -1e18) >= target:
            return e["ts"], e["env_steps"]
    return None, None


def launcher_start(run_dir: Path) -> float | None:
    for e in events(run_dir / "logs" / "launcher.jsonl"):
        if e.get("event") == "role_started":
            return e["ts"]
    return None


def sampling_start(run_dir: Path) -> float | None:
    """When the first sampler started sampling (its `sampling_started` event)."""
    starts = [e["ts"] for p in (run_dir / "logs").glob("sampler-*.jsonl") for e in events(p)
              if e.get("event") == "sampling_started"]
    return min(starts) if starts else None


def rss_mb(pid: int) -> float | None:
    """Resident memory of a process in MB (from /proc), None when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None
