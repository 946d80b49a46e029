"""What a role is: its context, its hooks and the helpers every role shares.

A role is an asyncio service run by `roles.service.serve`: it binds in `setup`,
works in `run`, follows membership in `on_membership`, reports in `metrics` and
persists what it owns in `teardown`.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from .. import wire
from ..comm.messaging import WireStats, reconnect, recv, send
from ..comm.stalls import Stalls
from ..comm.transport import Transport
from ..config import Job
from ..config.members import index_of
from ..config.roles import ROLES

if TYPE_CHECKING:
    from .membership import RegistryClient

__all__ = ["Rates", "Role", "RoleContext", "RoleRefused", "WireStats", "reconnect", "recv", "send",
           "role_class", "index_of", "default_incarnation", "ROLES"]


class RoleRefused(Exception):
    """The registry refused this member (for example its versions differ)."""


@dataclass
class RoleContext:
    """What a role is handed: its job, identity, registry endpoint and transport."""

    job: Job
    role: str
    member_id: str
    group: str
    index: int
    incarnation: int
    registry: str
    run_dir: Path
    host: str
    transport: Transport
    log: Any
    exit_on_stdin_eof: bool = False
    extra: dict[str, Any] = field(default_factory=dict)



class Helper(Protocol):
    """What a role runs for its life beside its own work (a tool client): a task (its
    failure fails the role), what it does when the membership changes, what it
    adds to the role's metrics."""

    async def run(self) -> None: ...

    def follow(self, members: dict[str, wire.Member]) -> None: ...

    def metrics(self) -> dict[str, float]: ...


class Role:
    """A role process's behaviour; `serve` runs it. Subclasses bind in `setup`,
    work in `run`, follow membership in `on_membership`, report in `metrics`."""

    name: ClassVar[str] = "role"
    uses_registry: ClassVar[bool] = True

    @classmethod
    def preload(cls) -> None:
        """What a warm spare imports ahead of need beyond the role's module."""

    def __init__(self, ctx: RoleContext):
        self.ctx = ctx
        # a gossip peer's group (its samplers, shard, evaluator) runs the peer's share
        # of the job's batch, envs, budget and evaluation interval (gossip.share_batch)
        self.job = ctx.job.peer_view()
        self.log = ctx.log
        self.wire_stats = WireStats(ctx.log, ctx.job.logging.interval_s)
        self.stalls = Stalls(ctx.log, 2 * ctx.job.launch.liveness_timeout_s)
        self.stop_event = asyncio.Event()
        self.stop_reason = ""
        self.endpoints: dict[str, str] = {}
        self.members: dict[str, wire.Member] = {}
        self.registry_client: RegistryClient | None = None
        self.started = time.monotonic()
        self.memory_error: BaseException | None = None  # what an address-space limit caused
        self.helpers: list[Helper] = []  # run beside the role's own work (a tool client)

    @property
    def id(self) -> str:
        return self.ctx.member_id

    def request_stop(self, reason: str) -> None:
        if not self.stop_event.is_set():
            self.stop_reason = reason
            self.log.info("stop_requested", reason=reason)
            self.stop_event.set()

    async def setup(self) -> None:
        """Bind sockets and fill `self.endpoints`."""

    async def run(self) -> None:
        """The role's work; may return (the role then idles until stopped)."""

    def on_membership(self, members: dict[str, wire.Member]) -> None:
        """Membership changed: connect to / disconnect from members of the group."""
        self.members = members
        for h in self.helpers:
            h.follow(members)

    def metrics(self) -> dict[str, float]:
        return {}

    def reported(self, values: dict[str, Any]) -> None:
        """After each metrics report: what a role reads in its own numbers (a
        trainer's or shard's health warnings)."""

    def status(self) -> dict[str, float]:
        """Small numbers carried by each heartbeat (queue depths, versions)."""
        return {}

    async def teardown(self) -> None:
        """Persist what the role owns; called once when stopping, crash or not."""

    def group_members(self, role: str) -> dict[str, wire.Member]:
        return {m.id: m for m in self.members.values()
                if m.role == role and m.group == self.ctx.group}

    async def job_shutdown(self, reason: str) -> None:
        """Ask the whole job to stop (through the registry), then stop this role."""
        if self.registry_client is not None:
            await self.registry_client.send_shutdown(reason)
        self.request_stop(reason)


class Rates:
    """Counters' change per second between two metrics reports: every role's
    `_per_s` metrics come from one of these."""

    def __init__(self, **counters: float):
        self.t = time.monotonic()
        self.last = dict(counters)

    def update(self, **counters: float) -> tuple[dict[str, float], float]:
        """(each counter's change since the last report, the seconds between)."""
        now = time.monotonic()
        dt = max(now - self.t, 1e-9)
        deltas = {k: v - self.last.get(k, 0.0) for k, v in counters.items()}
        self.t, self.last = now, dict(counters)
        return deltas, dt


def role_class(name: str, job: Job | None = None) -> type[Role]:
    """Import a role's module only when asked: the registry must not import torch.
    For a job whose env is a PettingZoo one, a role with a multi-agent variant
    (module `verl_zmq.roles.<role>_agents`) is that variant."""
    if name not in ROLES:
        raise KeyError(name)
    if job is not None:
        from ..envs.agents import is_multiagent

        if is_multiagent(job.environment):
            try:
                variant: type[Role] = importlib.import_module(
                    f"verl_zmq.roles.{name}_agents").ROLE
                return variant
            except ModuleNotFoundError:
                pass
    cls: type[Role] = importlib.import_module(f"verl_zmq.roles.{name}").ROLE
    return cls


def default_incarnation() -> int:
    """New at every start: microseconds since the epoch, mixed with the pid."""
    return (time.time_ns() // 1000) * 10 + os.getpid() % 10
