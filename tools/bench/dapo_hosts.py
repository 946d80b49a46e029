#!/usr/bin/env python
"""A machine per peer: DAPO's 4 peers on 4 namespace hosts (tools/hosts/netns.py),
each host's processes (its peer, sampler and shard) held by a cgroup CPU quota,
against PPO with its whole job (one learner, its samplers and shard) on one host
under the same quota. More machines should mean less time.

The registry, the evaluator and the launcher run on host 0, outside any quota
(both jobs have them). Hosts are given no pinned cores (`resources.*.cpu = 0`):
every namespace host shares this machine's cores, and the quota is what bounds
each. Arms run one after the other, interleaved by seed.

Printed per run: wall seconds from the first env step until every trainer's
evaluation reached the target, and the group's env steps then; then the mean
of each arm and the ratio of DAPO's to PPO's.

    python tools/bench/dapo_hosts.py [--seeds 0 1 2] [--quota 0.45] [--ppo-samplers 1]
        [--set gossip.compression='"terngrad"']

Needs root (network namespaces, cgroups), sshd and the ssh client.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: tools.*
from tools.bench.dapo import BASE, DAPO_JOB, _ppo, reached  # noqa: E402
from tools.harness import ROOT, start, stop  # noqa: E402
from tools.hosts.netns import Lab, unavailable  # noqa: E402

PEERS = 4
TARGET = 475.0


class CpuQuota:
    """A cgroup (v1 `cpu` controller, else v2 `cpu.max`) that holds the processes put
    in it, and every process they start afterwards, to `share` of one CPU."""

    def __init__(self, share: float):
        period = 100_000
        v1 = Path("/sys/fs/cgroup/cpu")
        name = f"vzbench-{uuid.uuid4().hex[:8]}"
        if (v1 / "cpu.cfs_quota_us").exists():
            self.path = v1 / name
            self.path.mkdir()
            (self.path / "cpu.cfs_period_us").write_text(str(period))
            (self.path / "cpu.cfs_quota_us").write_text(str(int(share * period)))
        elif "cpu" in Path("/sys/fs/cgroup/cgroup.controllers").read_text().split():
            self.path = Path("/sys/fs/cgroup") / name
            self.path.mkdir()
            (self.path / "cpu.max").write_text(f"{int(share * period)} {period}")
        else:
            raise SystemExit("no cgroup cpu controller to hold a host to a CPU share")

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def throttled(self) -> tuple[int, int]:
        """(periods, periods in which the quota stopped it) so far."""
        stat = dict(line.split() for line in (self.path / "cpu.stat").read_text().splitlines())
        return int(stat.get("nr_periods", 0)), int(stat.get("nr_throttled", 0))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            for pid in (self.path / "cgroup.procs").read_text().split():
                # the controller's parent takes them back: a cgroup with members stays
                (self.path.parent / "cgroup.procs").write_text(pid)
            self.path.rmdir()


def run_one(arm: str, seed: int, share: float, ppo_samplers: int, tmp: Path,
            extra: list[str]) -> dict:
    hosts_n = 1 + (PEERS if arm == "dapo" else 1)
    quotas: list[CpuQuota] = []
    with Lab(tmp / f"lab-{arm}-{seed}", hosts=hosts_n) as lab:
        try:
            for i in range(1, hosts_n):  # sshd first: every role it starts inherits it
                quotas.append(CpuQuota(share))
                quotas[-1].add(lab.sshd[i].pid)
            hosts = tmp / f"hosts-{arm}-{seed}.txt"
            lines = [f"{lab.addresses[0]} roles=registry,evaluator"]
            if arm == "dapo":
                job = ROOT / DAPO_JOB
                lines += [f"{a} roles=peer,sampler,replay" for a in lab.addresses[1:]]
                over = [*BASE, "resources.peer.cpu=0", "resources.sampler.cpu=0", *extra]
            else:
                job_name, over = _ppo(256)
                job = ROOT / job_name
                lines += [f"{lab.addresses[1]} roles=learner,sampler,replay"]
                over = [*over, f"sampling.num_workers={ppo_samplers}",
                        "resources.learner.cpu=0", "resources.sampler.cpu=0"]
            hosts.write_text("\n".join(lines) + "\n")
            run = tmp / f"run-{arm}-{seed}"
            t0 = time.time()
            p = start(job, run, [*lab.job_overrides(sys.executable, str(ROOT)), *over,
                                 f"experiment.seed={seed}",
                                 f"evaluation.stop_at_return={TARGET}"],
                      hosts=str(hosts), wrap=lab.wrap(0))
            try:
                p.wait(3600)
            finally:
                stop(p)
            out = reached(run, TARGET, time.time() - t0, peers=arm == "dapo")
            # the quota at work: the share of 100 ms periods in which it held a host
            out["throttled"] = [round(t / max(1, n), 2) for n, t in (q.throttled()
                                                                     for q in quotas)]
            return out
        finally:
            for q in quotas:
                q.close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--quota", type=float, default=0.45, help="CPUs a host may use")
    ap.add_argument("--ppo-samplers", type=int, default=1,
                    help="samplers of 8 envs beside PPO's learner on its one host")
    ap.add_argument("--arms", nargs="+", choices=["dapo", "ppo"], default=["dapo", "ppo"])
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                    help="overrides for the DAPO arm (e.g. gossip.compression=\"terngrad\")")
    ap.add_argument("--keep", type=Path, default=None,
                    help="keep every run's folder (events, logs) under this folder")
    args = ap.parse_args(argv)
    if why := unavailable():
        raise SystemExit(f"namespace hosts are not available: {why}")
    print(f"each host held to {args.quota} CPU; DAPO: {PEERS} hosts (a peer, its sampler "
          f"and shard each); PPO: one host (its learner, {args.ppo_samplers} sampler(s) of 8 "
          f"envs, shard)\n")
    print("| arm | seed | s to every trainer at 475 | env steps then | process s | "
          "periods throttled, per host |")
    print("|---|---|---|---|---|---|")
    rows: dict[str, list[dict]] = {a: [] for a in args.arms}
    with contextlib.ExitStack() as stack:
        t = str(args.keep) if args.keep else stack.enter_context(tempfile.TemporaryDirectory())
        for seed in args.seeds:
            for arm in args.arms:
                r = run_one(arm, seed, args.quota, args.ppo_samplers, Path(t), args.set)
                rows[arm].append(r)
                s = "> budget" if r["all_s"] is None else f"{r['all_s']:.1f}"
                n = "-" if r["all_steps"] is None else f"{r['all_steps']:,}"
                print(f"| {arm} | {seed} | {s} | {n} | {r['wall_s']:.1f} | "
                      f"{' '.join(map(str, r['throttled']))} |", flush=True)
    means = {}
    for arm, rs in rows.items():
        xs = [r["all_s"] for r in rs]
        if xs and all(x is not None for x in xs):
            means[arm] = sum(xs) / len(xs)
            steps = sum(r["all_steps"] for r in rs) / len(rs)
            print(f"\n{arm}: {means[arm]:.1f} s mean to every trainer at {TARGET:g}, "
                  f"{steps:,.0f} env steps")
    if "dapo" in means and "ppo" in means:
        print(f"wall ratio DAPO / PPO: {means['dapo'] / means['ppo']:.2f}")


if __name__ == "__main__":
    main()
