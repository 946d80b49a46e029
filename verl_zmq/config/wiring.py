"""The job's data flow, declared once: every connection a role makes, to which
endpoint (as the roles that bind it announce it to the registry: `RoleTraits.
endpoints`), with which socket pattern and high-water mark, to whom (its own
group's members, or the job's), and what travels on it. Code connects only
through these (`Transport.connect_edge`) and finds whom to reach with
`Edge.targets`; `tests/test_layout.py` checks that no socket is connected
otherwise, and ARCHITECTURE.md prints this table (`tools/gen_reference.py`).
Torch-free and zmq-free: patterns are named, not imported."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Literal, Protocol

from .roles import EVALUATOR, LEARNER, PEER, ROLE_TRAITS, ROLES, SAMPLER

MEMBERS = tuple(r for r in ROLES if not ROLE_TRAITS[r].rendezvous)  # all but the registry
TRAINERS = tuple(r for r in ROLES if ROLE_TRAITS[r].trains)
ACTORS = tuple(r for r in ROLES if ROLE_TRAITS[r].acts)  # they roll out: they call tools


class Announced(Protocol):
    """A member as the registry lists it (`wire.Member`)."""

    id: str
    role: str
    group: str
    endpoints: dict[str, str]


@dataclass(frozen=True)
class Edge:
    """One connection of the data flow."""

    name: str
    src: tuple[str, ...]  # the roles that connect
    endpoint: str  # the endpoint kind they connect to (its binders announce it)
    pattern: Literal["PUSH", "SUB", "DEALER", "TCP"]  # the connecting side's socket
    hwm: int  # its high-water mark, messages (0: not a ZeroMQ socket)
    # whom: the connector's group ("group"; "group+" also every group's in a
    # decentralised job), the job's ("job"), or the registry given on its command line
    scope: Literal["group", "group+", "job", "registry"]
    carries: str  # what travels, both ways

    @property
    def binders(self) -> tuple[str, ...]:
        """The roles that bind and announce this endpoint."""
        return tuple(r for r in ROLES if self.endpoint in ROLE_TRAITS[r].endpoints)

    def endpoint_of(self, m: Announced) -> str:
        """Where member `m` binds this edge's endpoint ("" where it does not)."""
        return m.endpoints.get(self.endpoint, "")

    def targets(self, members: Iterable[Announced], group: str | Collection[str],
                decentralised: bool = False) -> dict[str, str]:
        """{member id: endpoint} of the members this edge reaches from `group` (or
        from each of several: a multi-agent sampler's, one per trained policy)."""
        wide = self.scope == "job" or (self.scope == "group+" and decentralised)
        groups = {group} if isinstance(group, str) else set(group)
        return {m.id: ep for m in members if m.role in self.binders
                and (wide or m.group in groups) and (ep := self.endpoint_of(m))}


FRAGMENTS = Edge("fragments", (SAMPLER,), "fragments", "PUSH", 2, "group",
                 "fragments, round-robin over the group's shards (blocks when they are full)")
SAMPLER_PARAMS = Edge("sampler_params", (SAMPLER,), "params", "SUB", 4, "group",
                      "the group's trainer's params, the newest kept")
EVALUATOR_PARAMS = Edge("evaluator_params", (EVALUATOR,), "params", "SUB", 4, "group+",
                        "params to evaluate: the group's trainer's, every peer's in DAPO")
REQUESTS = Edge("requests", TRAINERS, "requests", "DEALER", 1000, "group",
                "credits and batch requests out; fragments and sampled batches back; "
                "priorities")
GOSSIP = Edge("gossip", (PEER,), "gossip", "DEALER", 10, "job",
              "hellos, params pulls, parameter and gradient rounds between peers")
DIST = Edge("dist", (LEARNER,), "dist", "TCP", 0, "group",
            "torch.distributed's rendezvous at rank 0, then its collectives (gloo, NCCL)")
TO_REGISTRY = Edge("registry", MEMBERS, "registry", "DEALER", 64, "registry",
                "registration, heartbeats, snapshot requests; replies")
MEMBERSHIP = Edge("membership", MEMBERS, "membership", "SUB", 1000, "registry",
                  "the membership: a snapshot, then sequenced deltas")
SPARE_REGISTRY = Edge("spare_registry", TRAINERS, "registry", "DEALER", 4, "registry",
                      "a warm spare asks the snapshot for the endpoint of the member it "
                      "follows")
TOOL_CALLS = Edge("tool_calls", ACTORS, "tools", "DEALER", 1000, "job",
                  "tool calls out (round-robin over the job's tool servers); answers back")
SCORES = Edge("scores", (SAMPLER,), "scores", "DEALER", 1000, "job",
              "responses to score out (round-robin over the job's reward-model servers); "
              "scores back")
SPARE_PARAMS = Edge("spare_params", TRAINERS, "params", "SUB", 4, "group",
                    "a warm spare follows its member's own params (follow.py)")

EDGES: dict[str, Edge] = {e.name: e for e in (
    FRAGMENTS, SAMPLER_PARAMS, EVALUATOR_PARAMS, REQUESTS, GOSSIP, DIST, TO_REGISTRY, MEMBERSHIP,
    SPARE_REGISTRY, SPARE_PARAMS, TOOL_CALLS, SCORES)}


def table() -> str:
    """The data flow as a markdown table (ARCHITECTURE.md's)."""
    rows = ["| from | to (its endpoint) | socket | hwm | whom | what travels |",
            "| --- | --- | --- | --- | --- | --- |"]
    for e in EDGES.values():
        whom = {"group": "its group's", "group+": "its group's (DAPO: every peer's)",
                "job": "any group's", "registry": "the registry"}[e.scope]
        rows.append(f"| {', '.join(e.src)} | {', '.join(e.binders)} (`{e.endpoint}`) | "
                    f"{e.pattern} | {e.hwm or '-'} | {whom} | {e.carries} |")
    return "\n".join(rows) + "\n"
