#!/usr/bin/env python
"""A long run under fire: a job on two namespace hosts over SSH (host 0: the
registry, the trainers, the shard, the evaluator and samplers; host 1:
samplers) for --minutes, its learner slowed so the samplers could produce many
times what it consumes (backpressure throughout), with faults on a fixed
schedule:

- every 60 s from minute 1: kill -9 of one member on host 0, the kinds in turn
  (sampler, replay shard, learner or DAPO peer, evaluator, registry), never the
  spared ones: the first member on host 0 of each kind that has more than one
  (their resident memory is tracked, with the launcher's);
- every 5 minutes from minute 2.5: host 1 partitioned from host 0 for 10 s;
- once, at a third of the run: host 1 crashes (link down, every process in it
  killed) and boots 5 s later;
- once, at two thirds: the run folder's disk (a tmpfs of its own) filled for
  20 s, then freed.

With --pairs, instead: every 30 s from 30 s on, two faults at once (each in a
thread of its own, both waited for before the next pair), drawn from every kind:
kill -9 of a sampler, the shard, the trainer, the evaluator or the registry,
host 1 partitioned for 10 s, host 1 crashed, the disk full for 20 s (a crash
and a partition of the same host are not drawn together).

One JSON line per fault (what, when, detected after, recovered after), then a
summary: faults survived, fragments sent, received and lost against what the
faults explain (in flight on a killed sampler, a shard's pipes, a cut or crashed
link: at most IN_FLIGHT per sampler each time), resident memory of each spared
role at minute 5 and at the end (the launcher's also every 10 minutes between:
whether a growth goes on or levels off), the exit code, whether every checkpoint
loads, the best evaluation, and any assertion in a role's stderr. Needs root.

    sudo python tools/faults/chaos_soak.py [--minutes 30] [--job configs/cartpole_ppo.toml]
    sudo python tools/faults/chaos_soak.py --pairs --minutes 60
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: tools.*
from tools.faults.chaos import Run, kill_one, wait  # noqa: E402
from tools.faults.scenarios import shipped  # noqa: E402
from tools.harness import ROOT, events, rss_mb  # noqa: E402

KINDS = ("sampler", "replay", "trainer", "evaluator", "registry")
# fragments a sampler may have sent that never arrive when its link or the
# other end goes: its send queue (2), the kernel's buffers (~2), one being written
IN_FLIGHT = 5


class Soak:
    """The job, its lab, the faults so far and their report lines."""

    def __init__(self, lab, job: str, tmp: Path, delay: float):
        self.lab, self.tmp = lab, tmp
        hosts = tmp / "hosts.txt"
        hosts.write_text(f"{lab.addresses[0]} roles=registry,learner,peer,replay,evaluator,"
                         f"sampler\n{lab.addresses[1]} roles=sampler,peer\n")
        self.run_dir = tmp / "disk" / "run"
        self.r = Run(job, self.run_dir, [*lab.job_overrides(sys.executable, str(ROOT)),
                                         "launch.max_restarts=1000",
                                         f"training.update_delay_s={delay}",
                                         "evaluation.stop_at_return=1e9"],
                     hosts=str(hosts), wrap=lab.wrap(0))
        self.t0 = time.time()
        self.faults: list[dict] = []
        self.skipped = 0  # kills with no process to kill (its pid's log line lost)
        self.host1_hits = 0  # samplers on host 1 at each cut or crash, summed
        self.sampler_kills = self.shard_kills = 0

    def at(self) -> float:
        return round(time.time() - self.t0, 1)

    def say(self, line: dict) -> None:
        self.faults.append(line)
        print(json.dumps(line), flush=True)

    def members(self, kind: str) -> list[str]:
        ms = self.r.members()
        want = ("learner", "peer") if kind == "trainer" else (kind,)
        return sorted(m for m, role in ms.items() if role in want)

    def on_host0(self) -> set[str]:
        return {e["member"] for e in self.r.launcher("role_started")
                if e.get("host") == self.lab.addresses[0]}

    def spared(self) -> list[str]:
        """The first member on host 0 of each kind with more than one (a crash of
        host 1 would take one there)."""
        here = self.on_host0()
        return [ms[0] for k in KINDS
                if len(self.members(k)) > 1 and (ms := [m for m in self.members(k) if m in here])]

    def host1_samplers(self) -> list[str]:
        there = self.lab.addresses[1]
        return sorted({e["member"] for e in self.r.launcher("role_started")
                       if e.get("host") == there and e["member"].startswith("sampler")})

    def shipped(self, member: str, after: float) -> bool:
        return shipped(self.run_dir, member, after) > 0

    # -- the faults -------------------------------------------------------------------

    def kill(self, kind: str, rng: random.Random) -> None:
        # host 0's: the launcher's pid of a host 1 role is its ssh client's (host 1
        # gets partitions and a crash instead)
        spared, here = set(self.spared()), self.on_host0()
        pool = [m for m in self.members(kind) if m not in spared and m in here]
        if not pool:
            return
        member = rng.choice(pool)
        t = self.at()
        out = kill_one(self.r, member, recover_s=120)
        if "skipped" in out:  # not a fault: said, not counted
            self.skipped += 1
            print(json.dumps({"fault_skipped": f"kill -9 {member}", "at_s": t,
                              "why": out["skipped"]}), flush=True)
            return
        at = self.r.back_at(member, out["t"])
        back = [at] if at is not None else []
        self.sampler_kills += kind == "sampler"
        self.shard_kills += kind == "replay"
        self.say({"fault": f"kill -9 {member}", "at_s": t,
                  "detected_s": round(back[0] - out["t"], 2) if back else None,
                  "recovered_s": round(out["recover_s"], 2) if out["recover_s"] else None,
                  **{k: out[k] for k in ("version_before", "version_after") if k in out}})

    def partition(self, seconds: float = 10.0) -> None:
        away, t = self.host1_samplers(), time.time()
        self.host1_hits += len(away)
        self.lab.partition(1)
        time.sleep(seconds)
        self.lab.heal(1)
        healed = time.time()
        left = [e["ts"] for e in events(self.run_dir / "logs" / "registry.jsonl")
                if e.get("event") == "member_left" and e["ts"] > t and e.get("member") in away]
        ok = wait(lambda: all(self.shipped(m, healed) for m in away), 120)
        self.say({"fault": f"host 1 partitioned {seconds:g} s", "at_s": round(t - self.t0, 1),
                  "detected_s": round(min(left) - t, 2) if left else None,
                  "recovered_s": round(time.time() - healed, 2) if ok else None})

    def crash(self) -> None:
        away, t = self.host1_samplers(), time.time()
        self.host1_hits += len(away)
        self.lab.lose(1)
        lost = wait(lambda: [e["ts"] for e in self.r.launcher("host_lost") if e["ts"] > t], 60)
        time.sleep(5)
        self.lab.boot(1)
        booted = time.time()
        # the launcher's `host_back`, or the lost samplers back by its restart line or their
        # own logs (a line of the launcher's may come late: a full disk at the same time
        # holds it back)
        back = wait(lambda: [e["ts"] for e in self.r.launcher("host_back") if e["ts"] > booted]
                    or [at for m in away if (at := self.r.back_at(m, booted)) is not None],
                    180)
        ok = back and wait(lambda: all(self.shipped(m, back[0]) for m in away), 120)
        self.say({"fault": "host 1 crashed, booted 5 s later", "at_s": round(t - self.t0, 1),
                  "detected_s": round(lost[0] - t, 2) if lost else None,
                  "recovered_s": round(time.time() - booted, 2) if ok else None})

    def disk_full(self, seconds: float = 20.0) -> None:
        filler, t = self.tmp / "disk" / "filler", time.time()
        subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=1M"], capture_output=True)
        said = wait(lambda: [e["ts"] for p in (self.run_dir / "logs").glob("*.jsonl")
                             for e in events(p) if e["ts"] > t
                             and str(e.get("event", "")).endswith(("_skipped", "_failed"))], 30)
        time.sleep(max(0.0, seconds - (time.time() - t)))
        filler.unlink()
        freed = time.time()
        ok = wait(lambda: any(e.get("event") == "metrics" and e["ts"] > freed
                              for m in self.members("trainer")
                              for e in events(self.run_dir / "logs" / f"{m}.jsonl")), 60)
        self.say({"fault": f"run folder's disk full {seconds:g} s", "at_s": round(t - self.t0, 1),
                  "detected_s": round(min(said) - t, 2) if said else None,
                  "recovered_s": round(time.time() - freed, 2) if ok else None})


def per_incarnation(run: Path, prefix: str, key: str) -> int:
    """`key` summed over every incarnation of every member named `prefix`*: each
    incarnation's last report."""
    total = 0
    for path in (run / "logs").glob(f"{prefix}*.jsonl"):
        last: dict[int, int] = {}
        for e in events(path):
            if e.get("event") == "metrics" and key in e:
                last[e.get("incarnation", 0)] = int(e[key])
        total += sum(last.values())
    return total


def role_pid(run: Path, member: str) -> int | None:
    """The member's own pid, from its newest `role_started` (the launcher's pid of
    a role started over SSH is its ssh client's)."""
    started = [e["pid"] for e in events(run / "logs" / f"{member}.jsonl")
               if e.get("event") == "role_started" and "pid" in e]
    return started[-1] if started else None


def memory(s: Soak) -> dict[str, float | None]:
    out = {m: rss_mb(pid) if (pid := role_pid(s.run_dir, m)) else None for m in s.spared()}
    return {**out, "launcher": rss_mb(s.r.proc.pid)}


def schedule(minutes: float) -> list[tuple[float, str]]:
    """(second, fault) in time order: see the module's docstring."""
    end = minutes * 60
    plan = [(60.0 * i, "kill") for i in range(1, int(end // 60))]
    plan += [(150.0 + 300 * i, "partition") for i in range(int((end - 150) // 300) + 1)
             if 150 + 300 * i < end - 30]
    plan += [(end / 3, "crash"), (2 * end / 3, "disk")]
    return sorted(plan)


def wait_sampling(s: Soak, mem: dict, at: float) -> None:
    """Wait until `at` s into the soak, taking the memory samples that fall due on
    the way: minute 5 (the baseline of the growth) and every 10 minutes after it
    (`by_minute`: whether a growth goes on or levels off)."""
    while time.time() < s.t0 + at:
        minute = int((time.time() - s.t0) // 60)
        due = 5 + 10 * ((minute - 5) // 10)  # the latest sample that fell due
        if minute >= 5 and due not in mem.setdefault("by_minute", {}):
            mem["by_minute"][due] = memory(s)  # late if a fault ran over its minute
            mem.setdefault("minute_5", mem["by_minute"][due])
        time.sleep(0.5)


def run_faults(s: Soak, minutes: float, seed: int) -> dict:
    """The schedule, then the memory samples: {"minute_5": ..., "end": ...}."""
    rng, turn = random.Random(seed), 0
    mem: dict = {}

    for at, what in schedule(minutes):
        wait_sampling(s, mem, at)
        if what == "kill":
            s.kill(KINDS[turn % len(KINDS)], rng)
            turn += 1
        else:
            {"partition": s.partition, "crash": s.crash, "disk": s.disk_full}[what]()
    wait_sampling(s, mem, minutes * 60)
    mem["end"] = memory(s)
    mem.setdefault("minute_5", mem["end"])
    return mem


PAIR_FAULTS = ("kill sampler", "kill replay", "kill trainer", "kill evaluator",
               "kill registry", "partition", "crash", "disk")


def draw_pair(rng: random.Random) -> tuple[str, str]:
    """Two faults of different kinds; not a crash and a partition of host 1 together."""
    while True:
        a, b = rng.sample(PAIR_FAULTS, 2)
        if {a, b} != {"partition", "crash"}:
            return a, b


def inject(s: Soak, fault: str, rng: random.Random) -> None:
    if fault.startswith("kill "):
        s.kill(fault.split()[1], rng)
    else:
        {"partition": s.partition, "crash": s.crash, "disk": s.disk_full}[fault]()


def run_pairs(s: Soak, minutes: float, seed: int, every: float = 30.0) -> dict:
    """Two faults at once every `every` seconds (the next pair waits for both);
    the memory samples as `run_faults` takes them."""
    from concurrent.futures import ThreadPoolExecutor

    rng = random.Random(seed)
    mem: dict = {}

    at = every
    while at < minutes * 60 - every / 2:
        wait_sampling(s, mem, at)
        pair = draw_pair(rng)
        # each thread its own generator: which member a kill picks stays seeded
        rngs = [random.Random(rng.random()) for _ in pair]
        with ThreadPoolExecutor(2) as ex:
            list(ex.map(lambda fr: inject(s, *fr), zip(pair, rngs, strict=True)))
        at = max(at + every, time.time() - s.t0)
    wait_sampling(s, mem, minutes * 60)
    mem["end"] = memory(s)
    mem.setdefault("minute_5", mem["end"])
    return mem


def summary(s: Soak, mem: dict, rc: int | None) -> dict:
    import torch

    run = s.run_dir
    sent = per_incarnation(run, "sampler-", "sampler/fragments")
    got = per_incarnation(run, "replay-", "replay/inserts") \
        + per_incarnation(run, "replay-", "replay/rejected")
    samplers = len(s.members("sampler"))
    explained = IN_FLIGHT * (s.sampler_kills + s.host1_hits + s.shard_kills * samplers)
    loads = []
    for p in sorted((run / "checkpoints").rglob("*.pt")):
        try:
            torch.load(p, weights_only=True)
            loads.append(True)
        except Exception:  # a truncated or corrupt file
            loads.append(False)
    growth = {m: round(100 * (mem["end"][m] / mem["minute_5"][m] - 1), 2)
              for m in mem["end"] if mem["end"].get(m) and mem["minute_5"].get(m)}
    asserts = [p.name for p in (run / "logs").glob("*.err") if "Assertion" in p.read_text()]
    try:
        best = json.loads((run / "summary.json").read_text()).get("best_eval_return")
    except (OSError, ValueError):
        best = None
    return {"summary": True, "minutes": round((time.time() - s.t0) / 60, 1),
            "faults": len(s.faults), "kills_skipped": s.skipped,
            "survived": sum(f.get("recovered_s") is not None for f in s.faults),
            # sent: each incarnation's last report, so a killed sampler's last
            # metrics interval of sends is missing (received can exceed it)
            "fragments_sent": sent, "fragments_received": got, "fragments_lost": sent - got,
            "loss_explained_up_to": explained, "every_loss_explained": sent - got <= explained,
            "rss_mb_minute_5": mem["minute_5"], "rss_mb_end": mem["end"],
            "launcher_rss_mb_by_minute": {m: v.get("launcher")
                                          for m, v in mem.get("by_minute", {}).items()},
            "rss_growth_pct": growth, "exit_code": rc,
            "checkpoints": len(loads), "checkpoints_load": all(loads) and bool(loads),
            "best_eval_return": best, "assertions_in_err": asserts}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--job", default=str(ROOT / "configs" / "cartpole_ppo.toml"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--delay", type=float, default=0.3,
                    help="seconds the learner sleeps after each update")
    ap.add_argument("--pairs", action="store_true",
                    help="two faults at once every 30 s, of every kind (see above)")
    args = ap.parse_args()
    from tools.hosts.netns import Lab, unavailable

    if why := unavailable():
        print(json.dumps({"ran": False, "why": why}))
        return 2
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        (tmp / "disk").mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1g", "tmpfs", str(tmp / "disk")],
                       check=True)
        try:
            with Lab(tmp / "lab", hosts=2) as lab:
                s = Soak(lab, args.job, tmp, args.delay)
                if not wait(s.r.progress, 300):
                    print(json.dumps({"ran": False, "why": "no update within 300 s"}))
                    s.r.stop()
                    return 1
                s.t0 = time.time()  # the schedule starts when training does
                mem = (run_pairs if args.pairs else run_faults)(s, args.minutes, args.seed)
                s.r.proc.send_signal(signal.SIGINT)
                try:
                    rc = s.r.proc.wait(180)
                except subprocess.TimeoutExpired:
                    rc = None
                    s.r.stop()
                print(json.dumps(summary(s, mem, rc)), flush=True)
        finally:
            subprocess.run(["umount", "-l", str(tmp / "disk")], capture_output=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
