#!/usr/bin/env python
"""libzmq's `Assertion failed: _input_stopped (stream_engine_base.cpp)`, driven
hard: a reader that connects (SUB or PULL) stalls for longer than the liveness
timeout while the sender keeps sending, so its receive pipe is full, then drains.
Each trial is a fresh process; the tool prints, per variant, how many trials
were killed by SIGABRT.

What a variant varies:
  pattern    pubsub (a PUB binds, a SUB connects: params and membership),
             pushpull (a PUSH binds, a PULL connects) or pullbind (a PULL binds,
             a PUSH connects: the fragment path)
  liveness   zmtp: ZMTP heartbeats on both sides (IVL, TIMEOUT, TTL), as every
             socket had them; ours: what verl_zmq.comm.transport sets now
             (liveness_options); off: none
  buffer     small (SNDBUF/RCVBUF of about two messages) or default
  cpu        a Python thread spinning beside the reader (holds the GIL)
  fork       the trial runs in a child forked after zmq is imported (as roles
             are forked from the fork server) or in the process itself

    python tools/faults/zmq_abort.py [--runs 10] [--seconds 6]
    python tools/faults/zmq_abort.py --all   # every combination, not one change at a time
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: verl_zmq

# the job's defaults scaled down so a trial sees many timeouts: the heartbeat
# interval and the time after which a silent connection is dropped
IVL_MS, DEAD_MS = 200, 600


@dataclass(frozen=True)
class Variant:
    pattern: str = "pubsub"
    liveness: str = "zmtp"
    buffer: str = "default"
    cpu: bool = False
    fork: bool = False

    def name(self) -> str:
        return (f"{self.pattern} liveness={self.liveness} buffer={self.buffer}"
                f"{' cpu' if self.cpu else ''}{' forked' if self.fork else ''}")


def _options(v: Variant, kind: int, server: bool, size: int) -> dict[int, int]:
    import zmq

    opts: dict[int, int] = {zmq.LINGER: 0, zmq.SNDHWM: 4, zmq.RCVHWM: 4}
    if v.liveness == "zmtp":
        opts.update({zmq.HEARTBEAT_IVL: IVL_MS, zmq.HEARTBEAT_TIMEOUT: DEAD_MS,
                     zmq.HEARTBEAT_TTL: DEAD_MS, zmq.CONNECT_TIMEOUT: DEAD_MS})
    elif v.liveness == "ours":
        from verl_zmq.comm.transport import liveness_options

        opts.update(liveness_options(kind, server, IVL_MS, DEAD_MS))
    if v.buffer == "small":
        opts.update({zmq.SNDBUF: 2 * size, zmq.RCVBUF: 2 * size})
    return opts


def _sockets(v: Variant, size: int):
    """The sender and the reader, connected."""
    import zmq

    ctx = zmq.Context()
    send_kind, recv_kind = ((zmq.PUB, zmq.SUB) if v.pattern == "pubsub"
                            else (zmq.PUSH, zmq.PULL))
    reader_binds = v.pattern == "pullbind"
    tx, rx = ctx.socket(send_kind), ctx.socket(recv_kind)
    for sock, kind, server in ((tx, send_kind, not reader_binds),
                               (rx, recv_kind, reader_binds)):
        for k, val in _options(v, kind, server, size).items():
            sock.setsockopt(k, val)
    if recv_kind == zmq.SUB:
        rx.setsockopt(zmq.SUBSCRIBE, b"")
    bound, connecting = (rx, tx) if reader_binds else (tx, rx)
    port = bound.bind_to_random_port("tcp://127.0.0.1")
    connecting.connect(f"tcp://127.0.0.1:{port}")
    return tx, rx


def _read(rx, seconds: float) -> list[int]:
    """Drain for 0.1 s, then stall 1.5-2.5 liveness timeouts, again and again;
    the messages read in each drain."""
    rng = random.Random(os.getpid())
    end = time.monotonic() + seconds
    got: list[int] = []
    while time.monotonic() < end:
        drain_end = time.monotonic() + 0.1
        got.append(0)
        while time.monotonic() < drain_end:
            if rx.poll(10):
                rx.recv()
                got[-1] += 1
        time.sleep(rng.uniform(1.5, 2.5) * DEAD_MS / 1000)
    return got


def _trial(v: Variant, seconds: float, size: int) -> None:
    """The sender floods as fast as the pattern allows while the reader stalls."""
    import zmq

    tx, rx = _sockets(v, size)
    stop = threading.Event()

    def send() -> None:
        payload = os.urandom(size)
        while not stop.is_set():
            try:
                tx.send(payload, zmq.NOBLOCK)
            except zmq.Again:
                time.sleep(0.001)

    def spin() -> None:
        x = 0
        while not stop.is_set():
            x = (x * 31 + 7) % 1_000_003

    threads = [threading.Thread(target=send, daemon=True)]
    if v.cpu:
        threads.append(threading.Thread(target=spin, daemon=True))
    for t in threads:
        t.start()
    got = _read(rx, seconds)
    stop.set()
    for t in threads:
        t.join(1)
    if not any(got[-3:]):  # liveness that stops delivery is no fix
        print(f"reader starved: messages per drain {got}", file=sys.stderr, flush=True)
        os._exit(3)
    os._exit(0)  # not ctx.term(): a trial is judged by how it ended, not by teardown


def _child(v: Variant, seconds: float, size: int) -> int:
    if not v.fork:
        _trial(v, seconds, size)
    import zmq  # noqa: F401 - imported before the fork, as in the fork server

    pid = os.fork()
    if pid == 0:
        _trial(v, seconds, size)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        os.kill(os.getpid(), os.WTERMSIG(status))  # die as the trial died
    return os.WEXITSTATUS(status)


def run_variant(v: Variant, runs: int, seconds: float, size: int) -> dict:
    aborts = other = 0
    errors: list[str] = []
    for _ in range(runs):
        p = subprocess.run([sys.executable, __file__, "--child", json.dumps(asdict(v)),
                            "--seconds", str(seconds), "--size", str(size)],
                           capture_output=True, text=True, timeout=seconds + 60)
        if p.returncode == -signal.SIGABRT:
            aborts += 1
        elif p.returncode != 0:
            other += 1
            errors.append((p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1])
    out = {"variant": v.name(), "runs": runs, "aborts": aborts, "other_failures": other,
           "abort_rate": round(aborts / runs, 3)}
    return out | ({"errors": sorted(set(errors))} if errors else {})


def variants(every: bool, liveness: list[str]) -> list[Variant]:
    if every:
        return [Variant(p, lv, b, c, f) for lv, p, b, c, f in itertools.product(
            liveness, ("pubsub", "pushpull", "pullbind"), ("default", "small"), (False, True),
            (False, True))]
    out = []
    for lv in liveness:  # the base, then one change at a time
        base = Variant(liveness=lv)
        out += [base, replace(base, pattern="pushpull"), replace(base, pattern="pullbind"),
                replace(base, buffer="small"),
                replace(base, cpu=True), replace(base, fork=True)]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=6.0, help="per trial")
    ap.add_argument("--size", type=int, default=65536, help="bytes per message")
    ap.add_argument("--liveness", nargs="+", default=["zmtp", "ours", "off"])
    ap.add_argument("--all", action="store_true", help="every combination")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return _child(Variant(**json.loads(args.child)), args.seconds, args.size)
    import zmq

    print(json.dumps({"libzmq": zmq.zmq_version(), "pyzmq": zmq.__version__,
                      "heartbeat_ivl_ms": IVL_MS, "dead_after_ms": DEAD_MS}), flush=True)
    for v in variants(args.all, args.liveness):
        print(json.dumps(run_variant(v, args.runs, args.seconds, args.size)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
