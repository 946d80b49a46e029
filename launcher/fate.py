"""What a role's death means: whether it is restarted (and when), and, once it
has failed for good, whether its job can go on.

A role that exits non-zero is restarted by the job's policy: the first time at
once (a warm spare makes it cheap), then with a backoff doubling from
`launch.restart_backoff_s` up to MAX_BACKOFF_S, up to `launch.max_restarts`
times (`max_restarts_per_role`); one that had been up for
`launch.restart_window_s`, or a trainer that updated since its last start (a
takeover that worked), starts its budget and backoff afresh, and bad input
(exit 2) is never retried.

A centralised job cannot go on without its vital roles (the registry, the
learners), nor once every process of a role its group needs has failed for good
(no sampler left to step envs, no shard to hold fragments, no evaluator to end
it). A decentralised job has no centre: it fails only once no group (a peer,
its shard and samplers) can train.
"""

from __future__ import annotations

from verl_zmq.config import Job, Launch
from verl_zmq.config.roles import role_traits

from .plan import Placement
from .remote import RoleProcess

MAX_BACKOFF_S = 60.0  # restart delays double up to this


def restart_delay(L: Launch, rp: RoleProcess, rc: int, now: float,
                  worked: bool = False) -> float | None:
    """Seconds to wait before restarting `rp`, which exited with `rc`; None to give
    up (bad input, exit 2, or the restart budget spent). `worked`: it did its work
    since its last start (a trainer updated). Counts the restart."""
    # a role that had been up for the window, or that worked, crashed anew, not in
    # a loop: the budget and the backoff start afresh (a week-long job survives a
    # crash a day; a learner killed again after its takeover trained is taken over
    # at once, not after a doubling delay)
    if worked or now - rp.started_at >= L.restart_window_s:
        rp.streak = 0
    if rc == 2 or rp.streak >= L.max_restarts_per_role.get(rp.placement.role, L.max_restarts):
        return None
    # the first restart of a role that was up is immediate (a warm spare makes it
    # cheap); a crash loop backs off from restart_backoff_s, doubling
    delay = 0.0 if rp.streak == 0 else min(L.restart_backoff_s * 2 ** (rp.streak - 1),
                                           MAX_BACKOFF_S)
    rp.streak += 1
    rp.restarts += 1
    return delay


class Fate:
    """The members failed for good, and the rule above."""

    def __init__(self, job: Job, placements: list[Placement]):
        self.decentralised = job.traits.decentralised
        self.placements = placements
        self.failed: list[str] = []

    def job_ended(self, exits: dict[str, int | None]) -> bool:
        """Whether the job is over, from each member's exit code (None: running):
        the rendezvous (registry) exited cleanly, or every trainer exited cleanly or
        failed for good, one of them cleanly."""
        by_role = [(role_traits(p.role), exits.get(p.member_id)) for p in self.placements]
        if all(rc == 0 for t, rc in by_role if t.rendezvous):
            return True
        trainers = [(p.member_id, exits.get(p.member_id)) for p in self.placements
                    if role_traits(p.role).trains]
        ended = [rc == 0 or m in self.failed for m, rc in trainers]
        return bool(trainers and all(ended) and any(rc == 0 for _, rc in trainers))

    def vital(self, p: Placement) -> bool:
        """A centralised job's registry and learners."""
        return role_traits(p.role).vital and not self.decentralised

    def fails_job(self, p: Placement) -> bool:
        """Whether `p`, failed for good (in `failed`), ends the job as failed."""
        if self.vital(p):
            return True
        t = role_traits(p.role)
        if not self.decentralised:
            return t.needed and self._all_failed(p.group, p.role)
        trainer_groups = {q.group for q in self.placements if role_traits(q.role).trains}
        if p.group not in trainer_groups:
            return t.needed and self._all_failed(p.group, p.role)
        return all(self._group_lost(g) for g in trainer_groups)

    def _all_failed(self, group: str, role: str) -> bool:
        return all(q.member_id in self.failed for q in self.placements
                   if q.group == group and q.role == role)

    def _group_lost(self, group: str) -> bool:
        """A group that cannot train any more: its trainers, or every process of a
        role it needs, failed for good."""
        roles = {q.role for q in self.placements if q.group == group}
        return any((role_traits(r).needed or role_traits(r).trains)
                   and self._all_failed(group, r) for r in roles)
