"""The roles a job is made of, and what the rest of the system may know of each
without importing it: the one place where a role's name decides behaviour.

Torch-free and zmq-free: the launcher, the config checks and every role read it.
Elsewhere a role's name is only a name (a config section, a metric prefix, a
member id); what a role *does* differently is a trait here.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Literal


class Placing(Enum):
    """Where the planner puts a role's processes among the hosts that allow it."""

    FIRST = "first"  # the first host with room
    SPREAD = "spread"  # round-robin over the hosts (samplers: envs everywhere)
    # round-robin, and its group's samplers follow it to its host where they fit: a
    # decentralised peer with its envs and shard is one machine's worth of the job
    SPREAD_WITH_GROUP = "spread_with_group"
    BESIDE_TRAINER = "beside_trainer"  # on its group's trainer's host (batches stay local)


@dataclass(frozen=True)
class RoleTraits:
    """What a role is, as the launcher, the planner and other roles see it."""

    name: str
    # its loss for good fails the job (a decentralised job fails only when every
    # trainer is lost: it has no centre)
    vital: bool
    trains: bool  # runs a Trainer: has a warm spare, devices, pinned cores, params
    ends_job: bool  # a clean exit means the job is finishing
    # the job cannot go on once every one of its group's processes has failed for good
    # (no sampler left to step envs, no shard to hold fragments, no evaluator to end it)
    needed: bool
    start_order: int  # who is spawned first (light roles before torch ones)
    endpoints: tuple[str, ...]  # what it binds and announces to the registry
    placing: Placing = Placing.FIRST
    forkable: bool = False  # torch-free: the fork server imports its module ahead
    numbered: bool = True  # its member ids are `<role>-<index>`
    # how its metrics are charted: under their own keys ("member": there is one that
    # charts), under each member's id ("each"), summed over its members, or not at all
    charts: Literal["member", "each", "sum", ""] = ""
    # the job's rendezvous: every member is given its endpoint at its start (it cannot
    # move to another host), and its clean exit means the job has ended
    rendezvous: bool = False
    acts: bool = False  # builds the job's policy to act (torch where it is not numpy)
    writes_policy: bool = False  # saves policy files with torch while the job runs


REGISTRY = "registry"
SAMPLER = "sampler"
REPLAY = "replay"
LEARNER = "learner"
EVALUATOR = "evaluator"
PEER = "peer"
TOOLSERVER = "toolserver"
REWARDMODEL = "rewardmodel"

# start order: the registry; then the light roles (numpy samplers step their envs
# about a second after they start, from their own version-0 weights); then the
# roles that import torch. A member that knocks before the registry has bound is
# fine: its register message waits in the socket, and it retries.
ROLE_TRAITS: dict[str, RoleTraits] = {
    REGISTRY: RoleTraits(REGISTRY, vital=True, trains=False, ends_job=True, needed=False,
                         start_order=0,
                         endpoints=("registry", "membership"), forkable=True, numbered=False,
                         rendezvous=True),
    SAMPLER: RoleTraits(SAMPLER, vital=False, trains=False, ends_job=False, needed=True,
                        start_order=1,
                        endpoints=(), placing=Placing.SPREAD, forkable=True, charts="sum",
                        acts=True),
    REPLAY: RoleTraits(REPLAY, vital=False, trains=False, ends_job=False, needed=True,
                       start_order=2,
                       endpoints=("fragments", "requests"), placing=Placing.BESIDE_TRAINER,
                       forkable=True, charts="sum"),
    LEARNER: RoleTraits(LEARNER, vital=True, trains=True, ends_job=True, needed=False,
                        start_order=3,
                        endpoints=("params", "dist"), charts="member"),
    PEER: RoleTraits(PEER, vital=False, trains=True, ends_job=True, needed=False,
                     start_order=3, placing=Placing.SPREAD_WITH_GROUP,
                     endpoints=("params", "gossip"), charts="each"),
    EVALUATOR: RoleTraits(EVALUATOR, vital=False, trains=False, ends_job=False, needed=True,
                          start_order=4,
                          endpoints=(), forkable=True, charts="member", acts=True,
                          writes_policy=True),
    # runs the job's tool calls (multi-turn rollouts), each in the sandbox, for every
    # sampler and evaluator of the job: no user tool runs where the policy acts
    TOOLSERVER: RoleTraits(TOOLSERVER, vital=False, trains=False, ends_job=False, needed=True,
                           start_order=1,
                           endpoints=("tools",), forkable=True, charts="sum"),
    # scores the samplers' responses with a learned reward model (torch), batching
    # the requests of every sampler of the job
    REWARDMODEL: RoleTraits(REWARDMODEL, vital=False, trains=False, ends_job=False,
                            needed=True, start_order=3,
                            endpoints=("scores",), charts="sum"),
}

ROLES: tuple[str, ...] = (REGISTRY, SAMPLER, REPLAY, LEARNER, EVALUATOR, PEER, TOOLSERVER,
                          REWARDMODEL)
TRAINER_ROLES: tuple[str, ...] = tuple(r for r in ROLES if ROLE_TRAITS[r].trains)
FORKABLE_ROLES: tuple[str, ...] = tuple(r for r in ROLES if ROLE_TRAITS[r].forkable)


def role_traits(name: str) -> RoleTraits:
    """A role's traits; KeyError naming the roles when `name` is none of them."""
    try:
        return ROLE_TRAITS[name]
    except KeyError:
        raise KeyError(f"{name!r} is not a role ({', '.join(ROLES)})") from None


def trains(name: str) -> bool:
    """Whether a role of this name runs a trainer (learner, peer)."""
    t = ROLE_TRAITS.get(name)
    return t is not None and t.trains


def default_member_id(role: str, index: int = 0) -> str:
    """The member id a role of this name gets by default: `sampler-0`, `registry`."""
    return f"{role}-{index}" if role_traits(role).numbered else role
