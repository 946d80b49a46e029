"""Placement: which role runs on which host, written to plan.json.

The registry goes first (on the first host that allows it); learners, peers
and replay shards go where they are allowed, filling hosts in order; samplers
are spread round-robin over the hosts that allow them (on a Ray cluster with
`launch.ray.placement = "pack"`, they fill hosts in order too). `slots` bounds the
number of roles (or, with `resources.<role>.cpu`, the cpus) put on a host.
A role with `resources.<role>.gpu = n` gets the next n GPUs of its host, its
own (`gpus=` in the hosts file bounds them), recorded in plan.json and exposed
to it alone through CUDA_VISIBLE_DEVICES.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from verl_zmq.config import Job
from verl_zmq.config.members import default_specs
from verl_zmq.config.roles import Placing, RoleTraits, role_traits

from .hosts import Host, HostsError


@dataclass
class Placement:
    """One role process: who it is and where it runs."""

    member_id: str
    role: str
    group: str
    host: int  # index into the plan's hosts
    gpus: list[int] = field(default_factory=list)  # its devices on that host (its own)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Plan:
    """The hosts and every role's placement; the registry's endpoint follows."""

    hosts: list[Host]
    placements: list[Placement]
    registry_port: int

    @property
    def registry_endpoint(self) -> str:
        reg = next(p for p in self.placements if role_traits(p.role).rendezvous)
        return f"tcp://{self.hosts[reg.host].bind_address}:{self.registry_port}"

    def host_of(self, p: Placement) -> Host:
        return self.hosts[p.host]

    def to_json(self) -> str:
        return json.dumps({
            "registry": self.registry_endpoint,
            "hosts": [{k: v for k, v in asdict(h).items() if k != "extra"} for h in self.hosts],
            "placements": [p.to_dict() for p in self.placements],
        }, indent=2)

    @classmethod
    def from_json(cls, text: str, registry_port: int) -> Plan:
        d = json.loads(text)
        hosts = [Host(**{**h, "roles": tuple(h.get("roles", ()))}) for h in d["hosts"]]
        return cls(hosts, [Placement(**p) for p in d["placements"]], registry_port)

    def write(self, run_dir: Path) -> None:
        (run_dir / "plan.json").write_text(self.to_json())


def role_list(job: Job) -> list[tuple[str, str, str]]:
    """(member id, role, group) for every role of the job, registry first."""
    return [(s.member_id, s.role, s.group) for s in default_specs(job)]


def _cpu(job: Job, role: str) -> int:
    res = getattr(job.resources, role, None)
    return max(1, res.cpu) if res is not None else 1


def _gpu(job: Job, role: str) -> int:
    res = getattr(job.resources, role, None)
    return max(0, res.gpu) if res is not None else 0


def _group_host(placements: list[Placement], group: str,
                member_is: Callable[[RoleTraits], bool]) -> int | None:
    """The host of the first placed member of `group` whose role `member_is`."""
    return next((p.host for p in placements
                 if p.group == group and member_is(role_traits(p.role))), None)


def make_plan(job: Job, hosts: list[Host]) -> Plan:
    used = [0] * len(hosts)
    gpus_used = [0] * len(hosts)
    placements: list[Placement] = []
    rr = 0

    def fits(i: int, role: str) -> bool:
        h = hosts[i]
        return h.allows(role) and (not h.slots or used[i] + _cpu(job, role) <= h.slots) \
            and (h.gpus < 0 or gpus_used[i] + _gpu(job, role) <= h.gpus)

    for member_id, role, group in role_list(job):
        candidates = [i for i in range(len(hosts)) if fits(i, role)]
        if not candidates:
            allowed = [i for i in range(len(hosts)) if hosts[i].allows(role)]
            why = ("no host allows it (check roles=)" if not allowed
                   else "every host that allows it is full (raise slots=, or gpus=)")
            if allowed and all(h.via == "srun" for h in hosts):
                need = sum(_cpu(job, r) for _, r, _ in role_list(job))
                have = sum(h.slots for h in hosts)
                why = (f"the Slurm allocation has {have} CPUs ({len(hosts)} node(s) x "
                       f"{hosts[0].slots}), the job's roles need {need} (one each, "
                       f"resources.*.cpu where set): ask for {need - have} more "
                       f"(sbatch -N / --ntasks-per-node), or run fewer roles")
            raise HostsError(f"cannot place {member_id}: {why}")
        placing = role_traits(role).placing
        if hosts[0].via == "ray" and job.launch.ray.placement == "pack":
            placing = Placing.FIRST
        # a peer's samplers go where their peer went (when that host allows them and
        # has room): each peer's envs, shard and updates stay on one machine
        leader = (_group_host(placements, group,
                              lambda t: t.placing is Placing.SPREAD_WITH_GROUP)
                  if placing is Placing.SPREAD else None)
        if leader in candidates:
            i = leader
        elif placing in (Placing.SPREAD, Placing.SPREAD_WITH_GROUP):
            # spread: the next allowed host after the last one used
            order = sorted(candidates, key=lambda i: (i - rr) % len(hosts))
            i = order[0]
            rr = i + 1
        elif placing is Placing.BESIDE_TRAINER:
            # a shard next to its group's learner/peer keeps batches off the network
            owner = _group_host(placements, group, lambda t: t.trains)
            i = owner if owner in candidates else candidates[0]
        else:
            i = candidates[0]
        used[i] += _cpu(job, role)
        g = _gpu(job, role)
        placements.append(Placement(member_id, role, group, i,
                                    list(range(gpus_used[i], gpus_used[i] + g))))
        gpus_used[i] += g
    return Plan(hosts, placements, job.registry_port)
