"""What a role that failed for good means for its job: whether the job can go on.

A centralised job cannot go on without its vital roles (the registry, the
learners), nor once every process of a role its group needs has failed for good
(no sampler left to step envs, no shard to hold fragments, no evaluator to end
it). A decentralised job has no centre: it fails only once no group (a peer,
its shard and samplers) can train.
"""

from __future__ import annotations

from verl_zmq.config import Job
from verl_zmq.config.roles import role_traits

from .plan import Placement


class Fate:
    """The members failed for good, and the rule above."""

    def __init__(self, job: Job, placements: list[Placement]):
        self.decentralised = job.traits.decentralised
        self.placements = placements
        self.failed: list[str] = []

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
