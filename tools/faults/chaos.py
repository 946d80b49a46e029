#!/usr/bin/env python
"""Chaos: run a job and `kill -9` one role at a time, at moments drawn from a
seeded schedule, at least once each kind (sampler, replay shard, learner or a
DAPO peer, evaluator, registry). Prints, per kill: the member, when, whether the
launcher restarted it (on a warm spare or not), and the time to recover: from the
kill to a killed learner's or peer's first update in its new process, or, for the
other kinds, to the first learner/peer metrics showing a param version above the
one before the kill after the member is back; then whether the job reached its
return target afterwards.

A learner or peer is killed once its warm spare is up (`--cold`: at once, a
cold restart when the spare is not there yet).

    python tools/faults/chaos.py [JOB] [--seed 0] [--rounds 1] [--target 475] [--cold]
    python tools/faults/chaos.py --kinds registry --rounds 6    # one kind, again and again
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: tools.*
from tools.harness import ROOT, events, poll, start, stop  # noqa: E402
from verl_zmq.files import pid_alive  # noqa: E402

KINDS = ("sampler", "replay", "learner", "evaluator", "registry")


class Run:
    """A running job and what its logs say."""

    def __init__(self, job: str, run: Path, extra: list[str], hosts: str = "local",
                 wrap: list[str] = ()):
        self.run = run
        self.proc = start(job, run, ["training.total_timesteps=100000000",  # we stop it
                                     "launch.max_restarts=20", "launch.restart_backoff_s=0.5",
                                     "logging.interval_s=0.5", *extra], hosts=hosts, wrap=wrap)

    def launcher(self, name: str) -> list[dict]:
        return [e for e in events(self.run / "logs" / "launcher.jsonl") if e.get("event") == name]

    def members(self) -> dict[str, str]:
        return {e["member"]: e["member_role"] for e in self.launcher("role_started")}

    def _latest_start(self, member: str) -> dict:
        started = [e for e in self.launcher("role_started") + self.launcher("role_restarted")
                   if e["member"] == member and "pid" in e]
        return max(started, key=lambda e: e["ts"])

    def pid(self, member: str) -> int:
        """The member's process: as the launcher logged its latest start, or, where
        that process is gone (a full disk cost the launcher's line), as the member's
        own log names its pid."""
        pid = self._latest_start(member)["pid"]
        if pid_alive(pid):
            return pid
        own = [e for e in events(self.run / "logs" / f"{member}.jsonl") if "pid" in e]
        return own[-1]["pid"] if own and pid_alive(own[-1]["pid"]) else pid

    def back_at(self, member: str, since: float) -> float | None:
        """When the member was back after `since`: the launcher's restart line, or
        the first line of a new incarnation in its own log."""
        back = [e["ts"] for e in self.launcher("role_restarted")
                if e["member"] == member and e["ts"] > since]
        if back:
            return back[0]
        own = events(self.run / "logs" / f"{member}.jsonl")
        before = {e.get("incarnation") for e in own if e.get("ts", 0) <= since}
        new = [e["ts"] for e in own if e.get("ts", 0) > since
               and e.get("incarnation") not in before]
        return new[0] if new else None

    def started_at(self, member: str) -> float:
        return self._latest_start(member)["ts"]

    def progress(self) -> list[tuple[float, int]]:
        """(time, param version) from every learner's and peer's metrics."""
        out = []
        for p in (self.run / "logs").glob("*.jsonl"):
            if p.stem.startswith(("learner", "peer")):
                for e in events(p):
                    v = e.get("learner/policy_version", e.get("peer/policy_version"))
                    if e.get("event") == "metrics" and isinstance(v, int):
                        out.append((e["ts"], v))
        return sorted(out)

    def stop(self) -> None:
        stop(self.proc)


def wait(pred, timeout: float, step: float = 0.25):
    return poll(pred, timeout, step)


def kill_one(r: Run, member: str, recover_s: float, await_spare: bool = True,
             sig: int = signal.SIGKILL) -> dict:
    """kill -9 `member` (or another signal: SIGABRT, as a libzmq assertion ends a
    process); wait until it is back and a new param version is out. A
    member that keeps a warm spare (launch.standby) is killed once its spare is up
    (at most 60 s of waiting), unless `await_spare` is off."""
    if await_spare and r.members().get(member) in ("learner", "peer"):
        since = r.started_at(member)
        wait(lambda: any(e["member"] == member and e["ts"] > since
                         for e in r.launcher("spare_started")), 60)
    before = max((v for _, v in r.progress()), default=0)
    pid = r.pid(member)
    t_kill = time.time()
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        # its latest incarnation is not in the launcher's log (a full disk cost the
        # line) or is starting: nothing was killed
        return {"member": member, "kind": r.members().get(member, "?"), "t": t_kill,
                "skipped": f"no process at its last logged pid {pid}", "restarted": False,
                "warm": False, "recover_s": None}
    t_back = wait(lambda: r.back_at(member, t_kill), recover_s)
    restarted = t_back is not None
    back = [e for e in r.launcher("role_restarted") if e["member"] == member
            and e["ts"] > t_kill]
    out: dict = {}
    if restarted and r.members().get(member) in ("learner", "peer"):
        # back at work: the new process's first update (it may resume below `before`);
        # the killed process's last version and env steps against the new one's first
        log = r.run / "logs" / f"{member}.jsonl"
        firsts = wait(lambda: [e for e in events(log)
                               if e.get("event") == "first_update" and e["ts"] > t_kill],
                      recover_s)
        rec = [e["ts"] for e in firsts] if firsts else None
        kind = r.members().get(member)
        ms = [e for e in events(log) if e.get("event") == "metrics"
              and f"{kind}/policy_version" in e]
        last = [e for e in ms if e["ts"] < t_kill]
        if last:
            out |= {"version_before": last[-1].get(f"{kind}/policy_version"),
                    "env_steps_before": last[-1].get(f"{kind}/env_steps")}
        if firsts:
            out |= {"version_after": firsts[0].get("version"),
                    "env_steps_after": firsts[0].get("env_steps")}
            # what the samplers and the evaluator had used before the kill, against
            # the replacement's first reported version after its first update (a
            # version floor, when it applies, is taken at its first publish)
            out["seen_before"] = max([out.get("version_before") or 0, *versions_seen(r, t_kill)])
            after = wait(lambda: [e for e in ms_of(log, kind) if e["ts"] > firsts[0]["ts"]],
                         recover_s)
            if after:
                out["published_after"] = after[0][f"{kind}/policy_version"]
            out["around"] = losses_around(last, after or [], kind)
    else:
        rec = wait(lambda: [t for t, v in r.progress() if t_back and t > t_back and v > before],
                   recover_s) if restarted else None
    return {"member": member, "kind": r.members().get(member, "?"), "t": t_kill,
            "restarted": restarted, "warm": bool(back and back[0].get("warm")),
            "recover_s": (rec[0] - t_kill) if rec else None, **out}


def ms_of(log: Path, kind: str) -> list[dict]:
    return [e for e in events(log) if e.get("event") == "metrics"
            and f"{kind}/policy_version" in e]


def versions_seen(r: Run, before: float) -> list[int]:
    """The params versions samplers reported using before `before`."""
    out = []
    for p in (r.run / "logs").glob("sampler-*.jsonl"):
        out += [e["sampler/policy_version"] for e in events(p)
                if e.get("event") == "metrics" and e["ts"] < before
                and isinstance(e.get("sampler/policy_version"), int)]
    return out


def losses_around(before: list[dict], after: list[dict], kind: str) -> dict:
    """Mean policy loss and approximate KL over the 5 metrics reports (each 0.5 s of
    updates) before the kill and the 5 after the replacement's first update."""
    def mean(rows: list[dict], key: str) -> float | None:
        vals = [e[key] for e in rows if isinstance(e.get(key), int | float)]
        return round(sum(vals) / len(vals), 4) if vals else None
    return {f"{k}_{w}": mean(rows, f"losses/{k}")
            for w, rows in (("before", before[-5:]), ("after", after[:5]))
            for k in ("policy_loss", "approx_kl")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("job", nargs="?", default=str(ROOT / "configs" / "cartpole_ppo.toml"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=1, help="kills of each kind")
    ap.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS),
                    help="which kinds to kill (learner means a peer in DAPO)")
    ap.add_argument("--target", type=float, default=475.0)
    ap.add_argument("--gap", type=float, nargs=2, default=[2.0, 5.0],
                    help="seconds between kills, drawn uniformly")
    ap.add_argument("--recover-s", type=float, default=90.0)
    ap.add_argument("--set", dest="extra", action="append", default=[])
    ap.add_argument("--signal", default="KILL", choices=["KILL", "ABRT", "SEGV"],
                    help="what ends each killed role")
    ap.add_argument("--cold", action="store_true",
                    help="kill learners and peers without waiting for their warm spares")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        r = Run(args.job, Path(tmp) / "run", args.extra)
        rc = 2
        try:
            rc = chaos(r, args, rng)
            return rc
        finally:
            r.stop()
            if rc != 0:  # keep the evidence
                import shutil

                keep = Path(tempfile.gettempdir()) / f"chaos-failed-{int(time.time())}"
                shutil.copytree(r.run, keep, dirs_exist_ok=True)
                print(f"run folder kept: {keep}")


def chaos(r: Run, args, rng: random.Random) -> int:
    if not wait(lambda: any(v > 0 for _, v in r.progress()), 180):
        print("the job never started training")
        return 2
    members = r.members()
    kinds = [k if k != "learner" or "learner" in members.values() else "peer"
             for k in args.kinds]
    schedule = [k for k in kinds for _ in range(args.rounds)]
    rng.shuffle(schedule)
    print(f"{'kind':<10}{'member':<14}{'at s':>7}{'restarted':>11}{'warm':>6}"
          f"{'recovered in s':>16}  version, env steps: before the kill -> first update")
    t0, rows = time.time(), []
    for kind in schedule:
        time.sleep(rng.uniform(*args.gap))
        member = rng.choice(sorted(m for m, role in r.members().items() if role == kind))
        row = kill_one(r, member, args.recover_s, not args.cold,
                       getattr(signal, f"SIG{args.signal}"))
        rows.append(row)
        rec = f"{row['recover_s']:.1f}" if row["recover_s"] is not None else "NOT"
        cont = (f"  {row.get('version_before')}, {row.get('env_steps_before')} -> "
                f"{row.get('version_after')}, {row.get('env_steps_after')}; seen "
                f"{row.get('seen_before')}, first published {row.get('published_after')}; "
                f"loss/KL 5 before {row['around'].get('policy_loss_before')}/"
                f"{row['around'].get('approx_kl_before')} after "
                f"{row['around'].get('policy_loss_after')}/"
                f"{row['around'].get('approx_kl_after')}"
                if "version_after" in row else "")
        print(f"{kind:<10}{member:<14}{row['t'] - t0:>7.1f}{str(row['restarted']):>11}"
              f"{str(row['warm']):>6}{rec:>16}{cont}", flush=True)
    t_done = time.time()
    best = wait(lambda: [e["eval/return_mean"] for p in (r.run / "logs").glob("evaluator-*.jsonl")
                         for e in events(p) if e.get("event") == "evaluated"
                         and e["ts"] > t_done and e["eval/return_mean"] >= args.target], 600, 1.0)
    restarts = len(r.launcher("role_restarted"))
    failed = [e["member"] for e in r.launcher("role_failed")]
    recovered = sum(1 for x in rows if x["recover_s"] is not None)
    takeovers = [x for x in rows if "published_after" in x]
    back = [x for x in takeovers if x["published_after"] <= x["seen_before"]]
    times = sorted(x["recover_s"] for x in takeovers if x["recover_s"] is not None)
    if takeovers:
        print(f"\ntakeovers {len(takeovers)}: first published version at or below one "
              f"already used: {len(back)}; trains again in median "
              f"{times[len(times) // 2]:.2f} s, max {times[-1]:.2f} s" if times else "")
    print(f"\nkills {len(rows)} ({', '.join(f'{k} {schedule.count(k)}' for k in kinds)}); "
          f"restarts {restarts}; recovered {recovered}/{len(rows)}; failed for good "
          f"{failed or 0}; target {args.target:g} after the kills: "
          f"{'reached (' + format(max(best), '.1f') + ')' if best else 'NOT reached'}")
    return 0 if best and recovered == len(rows) and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
