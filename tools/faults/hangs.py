#!/usr/bin/env python
"""No exchange can hang: stop the other side of each one (SIGSTOP) and see the
waiting side say so, within its deadline, in its log; then let it go (SIGCONT)
and see the wait end. Prints a row per exchange: who waited, on whom, the event
it logged, its deadline (as the job derives it) and when it came after the stop,
and when the wait ended after the release.

- the PPO job: its replay shard stopped (samplers' `fragments`, the learner's
  `requests`), its learner stopped (samplers' `sampler_params`), its registry
  stopped (every member's `registry` exchange: `registry_lost`);
- `--all` adds the DAPO job (a peer stopped: the others' `gossip`, each a
  request with the liveness deadline, the peer dropped as a neighbour and others
  chosen), two data-parallel learners (rank 1 stopped: rank 0's `dist`
  collectives, the group broken and formed again) and `verl serve` (stopped: the
  client's request ends in a TimeoutError at its deadline).

    python tools/faults/hangs.py [--all]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: tools.*
from tools.faults.chaos import Run, wait  # noqa: E402
from tools.harness import ROOT, events  # noqa: E402

SETS = ["evaluation.stop_at_return=1e9", "launch.standby=[]"]  # nothing ends or takes over
WAIT_S = 180.0  # how long the tool waits for a line (a bound on a loaded machine, not a deadline)


@dataclass
class Seen:
    """One waiting member's line about one exchange."""

    exchange: str
    waiter: str
    stopped: str
    event: str
    deadline_s: float | None
    said_after_s: float | None
    ended_after_s: float | None = None


def lines(r: Run, member: str, name: str, since: float) -> list[dict]:
    return [e for e in events(r.run / "logs" / f"{member}.jsonl")
            if e.get("event") == name and e.get("ts", 0) > since]


def trained(r: Run, versions: int) -> bool:
    return max((v for _, v in r.progress()), default=0) >= versions


def more(r: Run, versions: int) -> None:
    """Wait until the job has trained `versions` more (counted from now)."""
    target = max(v for _, v in r.progress()) + versions
    wait(lambda: trained(r, target), WAIT_S)


def stop_and_see(r: Run, stopped: str, expect: list[tuple[str, str, str, str]],
                 then_running: bool = True) -> list[Seen]:
    """SIGSTOP `stopped`; for each (waiter, exchange, event, its end event) wait for
    the waiter's line; SIGCONT; wait for each end line (after the release)."""
    pid = r.pid(stopped)
    t_stop = time.time()
    os.kill(pid, signal.SIGSTOP)
    out = []
    try:
        for waiter, exchange, event, _ in expect:
            def said(waiter=waiter, exchange=exchange, event=event) -> list[dict]:
                return [e for e in lines(r, waiter, event, t_stop)
                        if e.get("exchange", exchange) == exchange
                        and e.get("member", stopped) == stopped]
            got = wait(said, WAIT_S)
            e = got[0] if got else {}
            deadline = e.get("deadline_s", r.liveness_s if event == "registry_lost" else None)
            out.append(Seen(exchange, waiter, stopped, event, deadline,
                            round(e["ts"] - t_stop, 2) if got else None))
    finally:
        t_cont = time.time()
        os.kill(pid, signal.SIGCONT)
    if then_running:
        for seen, (waiter, exchange, _, end) in zip(out, expect, strict=True):
            back = wait(lambda waiter=waiter, end=end, exchange=exchange: [
                e for e in lines(r, waiter, end, t_cont - 0.5)
                if e.get("exchange", exchange) == exchange], WAIT_S)
            seen.ended_after_s = round(back[0]["ts"] - t_cont, 2) if back else None
    return out


class Job(Run):
    """A job run for this tool, with the liveness period it was given."""

    def __init__(self, job: str, run: Path, extra: list[str], heartbeat_s: float = 1.0):
        super().__init__(job, run, [*SETS, f"launch.heartbeat_interval_s={heartbeat_s}",
                                    *extra])
        self.liveness_s = 3 * heartbeat_s  # x launch.heartbeat_liveness, as shipped


def main_job(tmp: Path, heartbeat_s: float = 1.0) -> list[Seen]:
    """The README's PPO job: its shard, its learner, its registry stopped in turn
    (`heartbeat_s`: a shorter liveness period makes every deadline shorter)."""
    r = Job("configs/cartpole_ppo.toml", tmp / "ppo", [], heartbeat_s)
    try:
        if not wait(lambda: trained(r, 5), 300):
            raise SystemExit("the PPO job did not train within 300 s")
        samplers = sorted(m for m, k in r.members().items() if k == "sampler")
        rows = stop_and_see(r, "replay-0", [
            (samplers[0], "fragments", "exchange_stalled", "exchange_resumed"),
            ("learner-0", "requests", "exchange_stalled", "exchange_resumed")])
        more(r, 3)
        rows += stop_and_see(r, "learner-0", [
            (samplers[0], "sampler_params", "exchange_stalled", "exchange_resumed")])
        more(r, 3)
        rows += stop_and_see(r, "registry", [
            (samplers[0], "registry", "registry_lost", "registered"),
            ("learner-0", "registry", "registry_lost", "registered")])
        return rows
    finally:
        r.stop()


def dapo_job(tmp: Path) -> list[Seen]:
    r = Job("configs/cartpole_dapo.toml", tmp / "dapo", [])
    try:
        if not wait(lambda: trained(r, 3), 300):
            raise SystemExit("the DAPO job did not train within 300 s")
        peers = sorted(m for m, k in r.members().items() if k == "peer")
        rows = stop_and_see(r, peers[-1], [
            (p, "gossip", "neighbour_dropped", "neighbour_added") for p in peers[:-1]],
            then_running=False)
        for s in rows:
            s.deadline_s = r.liveness_s  # a hello's request deadline
        return rows
    finally:
        r.stop()


def dist_job(tmp: Path) -> list[Seen]:
    r = Job("configs/cartpole_ppo.toml", tmp / "dist", ["training.num_learners=2"])
    try:
        if not wait(lambda: trained(r, 3), 300):
            raise SystemExit("the two-learner job did not train within 300 s")
        rows = stop_and_see(r, "learner-1", [
            ("learner-0", "dist", "learner_group_broken", "learner_group_formed")])
        rows[0].deadline_s = r.liveness_s  # the registry drops the stopped rank
        return rows
    finally:
        r.stop()


def serve(tmp: Path) -> list[Seen]:
    """`verl serve` on a tiny exported policy, stopped while a client asks."""
    import numpy as np

    from tools.harness import free_ports
    from verl_zmq.ops.serve import PolicyClient

    ckpt = next((tmp / "ppo").glob("checkpoints/**/latest.pt"), None)
    if ckpt is None:
        return []
    model = tmp / "p.onnx"
    subprocess.run([sys.executable, "-m", "verl_zmq.cli", "export", str(ckpt), "--format",
                    "onnx", "--output", str(model)], cwd=ROOT, check=True, capture_output=True)
    port = free_ports()[0]
    log = tmp / "serve.jsonl"
    with open(log, "w") as f:
        server = subprocess.Popen([sys.executable, "-m", "verl_zmq.cli", "serve", str(model),
                                   "--bind", f"tcp://127.0.0.1:{port}"], cwd=ROOT, stdout=f,
                                  stderr=subprocess.DEVNULL)
    try:
        wait(lambda: any(e.get("event") == "serving" for e in events(log)), 60)
        client = PolicyClient(f"tcp://127.0.0.1:{port}", timeout_s=2.0)
        obs = np.zeros((1, 4), np.float32)
        client.act(obs)
        server.send_signal(signal.SIGSTOP)
        t0 = time.time()
        try:
            client.act(obs)
            said = None
        except TimeoutError:
            said = round(time.time() - t0, 2)
        finally:
            server.send_signal(signal.SIGCONT)
        t1 = time.time()
        ended = None
        for _ in range(30):
            try:
                client.act(obs)
                ended = round(time.time() - t1, 2)
                break
            except TimeoutError:
                continue
        return [Seen("serve", "client", "verl serve", "TimeoutError", 2.0, said, ended)]
    finally:
        server.terminate()
        server.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--all", action="store_true", help="DAPO, two learners and serve too")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        rows = main_job(tmp)
        if a.all:
            rows += serve(tmp) + dapo_job(tmp) + dist_job(tmp)
    print(f"{'exchange':<15} {'waiter':<11} {'stopped':<11} {'logged':<21} "
          f"{'deadline s':>10} {'said after s':>12} {'ended after s':>13}")
    for s in rows:
        print(f"{s.exchange:<15} {s.waiter:<11} {s.stopped:<11} {s.event:<21} "
              f"{s.deadline_s if s.deadline_s is not None else '-':>10} "
              f"{s.said_after_s if s.said_after_s is not None else 'NEVER':>12} "
              f"{s.ended_after_s if s.ended_after_s is not None else '-':>13}")
    silent = [s for s in rows if s.said_after_s is None]
    print(f"{len(rows)} waits, {len(silent)} silent")
    sys.exit(1 if silent else 0)


if __name__ == "__main__":
    main()
