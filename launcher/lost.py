"""What the supervisor does when a role's host is gone (`LostHosts`, which it
owns): over SSH, probe it with backoff and restart the role there when it
answers (a vital role fails the job at once); in a Slurm allocation or on a Ray
cluster, start the role again on the least loaded node left (srun ends a failed
node's steps with exit code 0 and says so on stderr; a Ray role's driver exits
with `NODE_LOST`)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from verl_zmq.config import Job
from verl_zmq.config.roles import role_traits

from .fate import Fate
from .hosts import Host
from .plan import Plan
from .ray_step import NODE_LOST
from .remote import RoleProcess, check_reachable, full_argv

SSH_LOST = 255  # ssh's own exit code: the connection failed or broke
MAX_PROBE_S = 30.0  # the longest wait between two probes of a lost host
NODE_FAILURE = "srun: error: Node failure on"  # what srun says of a step whose node died
CLUSTER = {"srun": "Slurm node", "ray": "Ray node"}


def node_failed(rp: RoleProcess, host: Host, rc: int) -> bool:
    """Whether the role ended because its Slurm or Ray node died: srun ends such a
    step with exit code 0 and says so on stderr; a Ray role's driver exits with
    NODE_LOST."""
    return (host.via == "srun" and NODE_FAILURE in rp.err_tail(5)) or \
        (host.via == "ray" and rc == NODE_LOST)


class LostHosts:
    """The hosts a job has lost (address -> the members lost with it, for the
    summary), and how a role whose host went is moved or restarted. It reads the
    job, its plan and run folder, logs and says what happened, marks members failed
    for good in the job's `Fate`, and ends the job through `fail_job`; `stopping`
    says whether the job is ending meanwhile."""

    def __init__(self, job: Job, plan: Plan, run_dir: Path, log: Any, term: Any, fate: Fate,
                 fail_job: Callable[[], None], stopping: Callable[[], bool]):
        self.job, self.plan, self.run_dir, self.log, self.term = job, plan, run_dir, log, term
        self.fate, self.fail_job, self.stopping = fate, fail_job, stopping
        self.lost: dict[str, set[str]] = {}

    async def move_off(self, rp: RoleProcess, host: Host) -> bool:
        """A node of a Slurm allocation or a Ray cluster failed under a role: the role
        starts again on the node of the same cluster that is not lost and runs the
        fewest roles (True); the registry, whose address every member holds, cannot
        move: the job fails with a line naming the node."""
        p = rp.placement
        kind = CLUSTER[host.via]
        name = host.node if host.via == "srun" and host.node else host.address
        self.lost.setdefault(host.address, set()).add(p.member_id)
        self.log.error("host_lost", host=host.address, member=p.member_id, member_role=p.role,
                       error=f"{kind} failure", **({"node": host.node} if name != host.address
                                                   else {}))
        alive = [i for i, h in enumerate(self.plan.hosts)
                 if h.via == host.via and h.address not in self.lost]
        if role_traits(p.role).rendezvous or not alive:
            self.fate.failed.append(p.member_id)
            self.term.say(f"error: {kind} {name} failed: its "
                          f"{p.role} {p.member_id} is lost"
                          f"{'' if alive else ' and no node of the cluster is left'}, "
                          f"the job fails")
            self.fail_job()
            return False
        load = {i: sum(1 for q in self.plan.placements if q.host == i) for i in alive}
        moved = dataclasses.replace(p, host=min(alive, key=lambda i: (load[i], i)))
        self.plan.placements[self.plan.placements.index(p)] = moved
        rp.placement = moved
        rp.argv = full_argv(self.job, self.plan, moved, self.run_dir)
        if rp.spare_argv is not None:
            rp.spare_argv = full_argv(self.job, self.plan, moved, self.run_dir, standby=True)
        rp.drop_spare()  # a spare on the lost node is no spare
        rp.restarts += 1
        await rp.start()
        to = self.plan.host_of(moved)
        self.log.warning("role_moved", member=p.member_id, member_role=p.role,
                         host=to.address, pid=rp.process.pid,
                         **({"node": to.node} if to.via == "srun" else {}))
        self.term.say(f"warning: {kind} {name} failed: {p.member_id} restarted on "
                      f"{to.node if to.via == 'srun' and to.node else to.address}")
        return True

    async def host_lost(self, rp: RoleProcess, host: Host) -> bool:
        """A role's SSH session ended with ssh's own failure: if its host does not
        answer, a vital role (the registry, the learner) fails the job with a line
        naming the host; any other waits, probing the host with backoff, and is
        restarted there when it answers (True). The lost roles are in the summary."""
        p = rp.placement
        why = await check_reachable(self.job, host, timeout_s=5.0)
        if not why:
            return await self._restart_on(rp, host)  # a broken session, not a lost host
        self.lost.setdefault(host.address, set()).add(p.member_id)
        self.log.error("host_lost", host=host.address, member=p.member_id,
                       member_role=p.role, error=why)
        if self.fate.vital(p):
            self.fate.failed.append(p.member_id)
            self.term.say(f"error: host {host.ssh_target} (hosts line {host.line}) is "
                          f"unreachable ({why}): its {p.role} {p.member_id} is lost, the "
                          f"job fails")
            self.fail_job()
            return False
        wait = 1.0
        while not self.stopping():
            await asyncio.sleep(wait)
            if self.stopping():
                return False
            why = await check_reachable(self.job, host, timeout_s=5.0)
            if not why:
                self.log.info("host_back", host=host.address, member=p.member_id)
                return await self._restart_on(rp, host)
            wait = min(wait * 2, MAX_PROBE_S)
        return False

    async def _restart_on(self, rp: RoleProcess, host: Host) -> bool:
        if self.stopping():
            return False
        rp.drop_spare()  # a spare on a host that was gone is no spare
        rp.restarts += 1
        await rp.start()
        self.log.info("role_restarted", member=rp.placement.member_id,
                      member_role=rp.placement.role, restarts=rp.restarts, after_s=0.0,
                      pid=rp.process.pid, warm=False, host=host.address)
        return True
