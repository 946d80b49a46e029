#!/usr/bin/env python
"""Fuzz a live job's sockets: start a job, open our own sockets to every bound
endpoint that takes messages (registry ROUTER, shard PULL and ROUTER, peer
gossip ROUTER) and send --frames messages to each: random bytes, truncated and
mutated valid messages, wrong protocol versions, huge declared shapes, wrong
dtypes, frame-count mismatches, oversized messages. Then check that every role
is alive, that each counted its rejects (`<role>/wire_errors`), that no role's
memory grew past --rss-mb, and that the job still reaches its target.

Valid commands (Register, Deregister, Shutdown, SampleRequest) are not used as
seeds for mutation: a well-formed one does what it says, which is not the point.

    python tools/faults/fuzz_wire.py [--job configs/cartpole_ppo.toml] [--frames 10000] [--seed 0]
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgpack
import numpy as np
import zmq

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout
from tools.harness import ROOT, events, rss_mb, start, stop  # noqa: E402  # noqa: E402
from verl_zmq import wire  # noqa: E402
from verl_zmq.wire.samples import (  # noqa: E402
    cartpole_fragment,
    mutate,
    samples,
    schema_mismatches,
)

CLIENT = {"registry": zmq.DEALER, "requests": zmq.DEALER, "gossip": zmq.DEALER,
          "fragments": zmq.PUSH}
COMMANDS = (wire.Register, wire.Deregister, wire.Shutdown, wire.SampleRequest)
OVERSIZE = 257 << 20  # past the 256 MiB message limit




def cases(rng: random.Random):
    """An endless mix of hostile frame lists, each labelled."""
    seeds = [[bytes(f) for f in wire.encode(m)] for m in samples()
             if not isinstance(m, COMMANDS)]
    header = msgpack.unpackb(seeds[0][0], raw=False)
    # well-formed fragments whose columns disagree with the job's (Dict keys where a
    # plain observation belongs, dtypes, shapes): decoded, then refused by the shard
    schema = [[bytes(f) for f in wire.encode(wire.Fragment(version=1, arrays=a))]
              for a in schema_mismatches()]
    # and a well-formed fragment of a policy this job does not have (a multi-agent
    # job's name, with its agent column): the shard's policy check drops it
    schema.append([bytes(f) for f in wire.encode(wire.Fragment(
        version=1, policy="intruder",
        arrays={**cartpole_fragment(16, 2), "agent": np.zeros((16, 2), np.int64)}))])
    while True:
        r = rng.randrange(11)
        base = rng.choice(seeds)
        if r == 10:
            yield "schema", rng.choice(schema)
            continue
        if r < 3:
            yield "random", [rng.randbytes(rng.randrange(512)) for _ in range(rng.randint(1, 3))]
        elif r < 7:
            yield "mutated", mutate(base, rng)
        elif r == 7:
            h = dict(header, v=rng.choice([0, 2, 99, "1", None]))
            yield "version", [msgpack.packb(h, use_bin_type=True)]
        elif r == 8:
            h = msgpack.unpackb(rng.choice(seeds[8:9] or seeds)[0], raw=False)
            if h.get("a"):
                spec = list(h["a"][0])
                spec[1] = rng.choice(["<c16", "|O", "<f16", "|V8", ">f4", 7])
                if rng.random() < 0.5:
                    spec[1], spec[2] = "<f4", [2**31, 2**31, 2**31]
                h["a"][0] = spec
            yield "dtype/shape", [msgpack.packb(h, use_bin_type=True)]
        else:
            yield "frames", base + [rng.randbytes(rng.randrange(64))] * rng.randint(1, 3)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--job", default=str(ROOT / "configs" / "cartpole_ppo.toml"))
    ap.add_argument("--frames", type=int, default=10_000, help="messages per endpoint")
    ap.add_argument("--oversized", type=int, default=1, help="oversized messages per endpoint")
    ap.add_argument("--endpoint-s", type=float, default=300.0,
                    help="at most this long per endpoint (a full shard reads slowly)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--target", type=float, default=475.0)
    ap.add_argument("--rss-mb", type=float, default=200.0,
                    help="largest RSS growth of any role that passes")
    ap.add_argument("--set", dest="extra", action="append", default=[])
    args = ap.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        # no early stop: the job must outlive the fuzzing; reaching the target after it
        # is checked from the evaluations, then the job is stopped
        job = start(args.job, run, ["security.curve=false", "training.total_timesteps=100000000",
                                    "logging.interval_s=1.0", *args.extra])
        try:
            return fuzz(run, job, args, rng)
        finally:
            stop(job)


def _endpoints(run: Path) -> dict[str, str]:
    out = {}
    for p in (run / "logs").glob("*.jsonl"):
        for e in events(p):
            if e.get("event") == "role_started":
                for name, ep in (e.get("endpoints") or {}).items():
                    if name in CLIENT:
                        out[f"{e['id']}:{name}"] = ep
    return out


MALFORMED = ("random", "version", "dtype/shape", "frames",  # can never decode
             "schema")  # decodes, but no role takes it


def send_all(eps: dict[str, str], args, rng: random.Random) -> tuple[int, int]:
    """--frames hostile messages (and --oversized ones) to each endpoint; (messages sent,
    of which certainly malformed). Mutated valid messages may still be valid; oversized
    ones are cut off by the transport before any role sees them."""
    ctx = zmq.Context()
    gen = cases(rng)
    print(f"{'endpoint':<28}{'sent':>8}  kinds")
    total = malformed = 0
    for key, ep in sorted(eps.items()):
        s = ctx.socket(CLIENT[key.split(":")[1]])
        s.linger = 10_000  # what is queued is delivered before the socket goes
        s.sndtimeo = 200
        s.connect(ep)
        kinds: dict[str, int] = {}
        sent = blocked = 0
        end = time.monotonic() + args.endpoint_s
        label, frames = next(gen)
        while sent < args.frames and time.monotonic() < end:
            try:
                s.send_multipart(frames)
            except zmq.Again:  # a full shard stops reading: backpressure holds us too
                blocked += 1
                continue
            sent += 1
            kinds[label] = kinds.get(label, 0) + 1
            label, frames = next(gen)
        if blocked:
            kinds["(send timeouts: backpressure)"] = blocked
        for _ in range(args.oversized):
            try:
                s.send(bytes(OVERSIZE))
                sent += 1
                kinds["oversized"] = kinds.get("oversized", 0) + 1
            except zmq.Again:
                pass
        s.close()
        total += sent
        malformed += sum(v for k, v in kinds.items() if k in MALFORMED)
        print(f"{key:<28}{sent:>8}  " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())),
              flush=True)
    ctx.term()
    return total, malformed


def fuzz(run: Path, job: subprocess.Popen, args, rng: random.Random) -> int:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        eps = _endpoints(run)
        if {k.split(":")[1] for k in eps} >= {"registry", "fragments", "requests"}:
            break
        time.sleep(0.5)
    else:
        print("the job did not bind its endpoints in time")
        return 2
    # memory is compared after warm-up: once the learner has counted env steps
    while time.monotonic() < deadline + 120 and not any(
            e.get("event") == "metrics" and e.get("learner/env_steps", 0) > 0
            for e in events(run / "logs" / "learner-0.jsonl")):
        time.sleep(0.5)
    time.sleep(3.0)
    pids = {e["member"]: e["pid"] for e in events(run / "logs" / "launcher.jsonl")
            if e.get("event") == "role_started"}
    before = {m: rss_mb(p) for m, p in pids.items()}
    total, malformed = send_all(eps, args, rng)
    time.sleep(3.0)  # let the roles log their counts
    after = {m: rss_mb(p) for m, p in pids.items()}
    dead = [m for m, v in after.items() if v is None and job.poll() is None]
    growth = {m: after[m] - before[m] for m in pids if after.get(m) and before.get(m)}
    worst = max(growth.items(), key=lambda kv: kv[1]) if growth else ("-", 0.0)
    print(f"largest RSS growth: {worst[0]} {worst[1]:+.1f} MB (bound {args.rss_mb:.0f} MB)")
    t_fuzzed = time.time()
    evals: list[float] = []
    while time.time() < t_fuzzed + 600 and job.poll() is None:
        evals = [e["eval/return_mean"] for e in events(run / "logs" / "evaluator-0.jsonl")
                 if e.get("event") == "evaluated" and e["ts"] > t_fuzzed]
        if evals and max(evals) >= args.target:
            break
        time.sleep(1.0)
    crashes = [e["member"] for e in events(run / "logs" / "launcher.jsonl")
               if e.get("event") == "role_died"] + dead
    reached = bool(evals) and max(evals) >= args.target
    print(f"crashes: {len(crashes)} {crashes if crashes else ''}")
    print(f"after the fuzzing: best eval {max(evals) if evals else None}; "
          f"target {args.target:g} {'reached' if reached else 'NOT reached'}")
    stop(job)
    errors: dict[str, int] = {}
    for p in (run / "logs").glob("*.jsonl"):
        for e in events(p):
            if e.get("event") == "metrics":
                for k, v in e.items():
                    if k.endswith("/wire_errors") and isinstance(v, int):
                        errors[e["id"]] = max(errors.get(e["id"], 0), v)
    print(f"frames sent {total:,}, certainly malformed {malformed:,}; rejects counted by the "
          f"roles {sum(errors.values()):,} "
          f"({', '.join(f'{k} {v:,}' for k, v in sorted(errors.items()) if v)})")
    ok = (not crashes and reached and worst[1] <= args.rss_mb
          and sum(errors.values()) >= malformed)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
