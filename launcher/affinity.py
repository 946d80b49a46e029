"""CPU affinity per role, decided per host so that samplers and the evaluator
never take a learner's cores: each learner or peer whose `resources.<role>.cpu`
is set gets that many cores of its own, counted from its host's last core, and
every other role on that host runs on the cores left. Hosts where no learner
asks for cores (or where learners only drain: `training.learn = false`) are left
to the OS scheduler.

The launcher need not know a remote host's cores: it hands each role a spec in
`VERL_CPUS`, "<reserved on this host>:<own core indexes, negative from the
end>" ("1:-1" a learner's, "1:" everyone else's), which the role resolves
against the cores it may use on its own host (`verl_zmq.runner.apply_cpus`).
"""

from __future__ import annotations

from verl_zmq.config import Job
from verl_zmq.config.roles import trains

from .plan import Plan


def cpu_specs(job: Job, plan: Plan) -> dict[str, str]:
    """member id -> VERL_CPUS spec, for the roles on hosts with reserved cores."""
    out: dict[str, str] = {}
    for h in range(len(plan.hosts)):
        here = [p for p in plan.placements if p.host == h]
        own: dict[str, list[int]] = {}
        reserved = 0
        for p in here:
            # a learner that drains without updating (`training.learn = false`)
            # computes nothing: its cores would sit idle beside busy samplers
            learns = trains(p.role) and job.training.learn
            want = getattr(job.resources, p.role).cpu if learns else 0
            if want > 0:
                own[p.member_id] = list(range(-reserved - 1, -reserved - want - 1, -1))
                reserved += want
        if not own:
            continue
        for p in here:
            out[p.member_id] = f"{reserved}:" + ",".join(map(str, own.get(p.member_id, [])))
    return out
