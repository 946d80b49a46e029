"""What the supervisor does when a role's host is gone: over SSH, probe it with
backoff and restart the role there when it answers (a vital role fails the job
at once); in a Slurm allocation, start the role again as a step on the least
loaded node left (srun ends a failed node's steps with exit code 0 and says so
on stderr)."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any, Protocol

from verl_zmq.config import Job
from verl_zmq.config.roles import role_traits

from .hosts import Host
from .plan import Placement, Plan
from .remote import RoleProcess, check_reachable, full_argv

SSH_LOST = 255  # ssh's own exit code: the connection failed or broke
MAX_PROBE_S = 30.0  # the longest wait between two probes of a lost host
NODE_FAILURE = "srun: error: Node failure on"  # what srun says of a step whose node died


class Supervisor(Protocol):
    """What host-loss handling reads and changes of the launcher's supervisor."""

    job: Job
    plan: Plan
    run_dir: Path
    log: Any
    term: Any
    stopping: bool
    lost: dict[str, set[str]]
    failed: list[str]

    def fail_job(self) -> None: ...

    def _vital(self, p: Placement) -> bool: ...


async def move_off(sup: Supervisor, rp: RoleProcess, host: Host) -> bool:
    """A Slurm node of the allocation failed under a role: the role starts again
    as a step on the node of the allocation that is not lost and runs the fewest
    roles (True); the registry, whose address every member holds, cannot move:
    the job fails with a line naming the node."""
    p = rp.placement
    sup.lost.setdefault(host.address, set()).add(p.member_id)
    sup.log.error("host_lost", host=host.address, node=host.node, member=p.member_id,
                  member_role=p.role, error="Slurm node failure")
    alive = [i for i, h in enumerate(sup.plan.hosts)
             if h.via == "srun" and h.address not in sup.lost]
    if role_traits(p.role).rendezvous or not alive:
        sup.failed.append(p.member_id)
        sup.term.say(f"error: Slurm node {host.node or host.address} failed: its "
                     f"{p.role} {p.member_id} is lost"
                     f"{'' if alive else ' and no node of the allocation is left'}, "
                     f"the job fails")
        sup.fail_job()
        return False
    load = {i: sum(1 for q in sup.plan.placements if q.host == i) for i in alive}
    moved = dataclasses.replace(p, host=min(alive, key=lambda i: (load[i], i)))
    sup.plan.placements[sup.plan.placements.index(p)] = moved
    rp.placement = moved
    rp.argv = full_argv(sup.job, sup.plan, moved, sup.run_dir)
    if rp.spare_argv is not None:
        rp.spare_argv = full_argv(sup.job, sup.plan, moved, sup.run_dir, standby=True)
    rp.drop_spare()  # a spare on the lost node is no spare
    rp.restarts += 1
    await rp.start()
    to = sup.plan.host_of(moved)
    sup.log.warning("role_moved", member=p.member_id, member_role=p.role,
                    host=to.address, node=to.node, pid=rp.process.pid)
    sup.term.say(f"warning: Slurm node {host.node or host.address} failed: "
                 f"{p.member_id} restarted on {to.node or to.address}")
    return True

async def host_lost(sup: Supervisor, rp: RoleProcess, host: Host) -> bool:
    """A role's SSH session ended with ssh's own failure: if its host does not
    answer, a vital role (the registry, the learner) fails the job with a line
    naming the host; any other waits, probing the host with backoff, and is
    restarted there when it answers (True). The lost roles are in the summary."""
    p = rp.placement
    why = await check_reachable(sup.job, host, timeout_s=5.0)
    if not why:
        return await _restart_on(sup, rp, host)  # a broken session, not a lost host
    sup.lost.setdefault(host.address, set()).add(p.member_id)
    sup.log.error("host_lost", host=host.address, member=p.member_id, member_role=p.role,
                  error=why)
    if sup._vital(p):
        sup.failed.append(p.member_id)
        sup.term.say(f"error: host {host.ssh_target} (hosts line {host.line}) is "
                     f"unreachable ({why}): its {p.role} {p.member_id} is lost, the job fails")
        sup.fail_job()
        return False
    wait = 1.0
    while not sup.stopping:
        await asyncio.sleep(wait)
        if sup.stopping:
            return False
        why = await check_reachable(sup.job, host, timeout_s=5.0)
        if not why:
            sup.log.info("host_back", host=host.address, member=p.member_id)
            return await _restart_on(sup, rp, host)
        wait = min(wait * 2, MAX_PROBE_S)
    return False

async def _restart_on(sup: Supervisor, rp: RoleProcess, host: Host) -> bool:
    if sup.stopping:
        return False
    rp.drop_spare()  # a spare on a host that was gone is no spare
    rp.restarts += 1
    await rp.start()
    sup.log.info("role_restarted", member=rp.placement.member_id,
                 member_role=rp.placement.role, restarts=rp.restarts, after_s=0.0,
                 pid=rp.process.pid, warm=False, host=host.address)
    return True
