"""The job file's sections on where and how its processes run, rather than what
it learns: `[launch]` (how many of each role, ports, liveness, restarts, warm
spares, remote start, Kubernetes), `[resources]` (per role) and `[security]`.
The comment beside a key is its reference note (tools/gen_reference.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from .roles import TRAINER_ROLES


@dataclass(frozen=True)
class Security:
    """CURVE: "auto" (and true) is on for every job the launcher starts, local ones
    too; false turns it off (with a warning). A role started by hand joins a CURVE
    job with `--keys RUN_DIR/keys.json`; true makes it refuse to start without."""

    curve: bool | str = "auto"  # auto/true: CURVE on every launched job; false: off


@dataclass(frozen=True)
class K8s:
    """What `verl-launch k8s` writes into the manifests besides the job."""

    image: str = "verl-zmq:latest"  # an image with verl-zmq installed (tools/Containerfile)
    pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"  # the image's
    namespace: str = "default"  # the Kubernetes namespace of every object
    service_account: str = ""  # empty: the namespace's default
    # e.g. {"kubernetes.io/arch" = "amd64"}
    node_selector: dict[str, Any] = field(default_factory=dict)
    volume: str = ""  # a PersistentVolumeClaim for the run folder; empty: each pod's own
    ttl_s: int = 3600  # finished Jobs (and their pods) are deleted after this; 0: kept


@dataclass(frozen=True)
class RayTarget:
    """How `verl-launch ray JOB` uses a Ray cluster's nodes."""

    # spread: samplers round-robin over the nodes (as on any hosts); pack: every
    # role on the first node with room, the head first
    placement: Literal["spread", "pack"] = "spread"
    start_timeout_s: float = 120.0  # a role's actor not placed by then: it failed to start


@dataclass(frozen=True)
class Launch:
    """How many of each role, ports, liveness, restarts, remote start."""

    replay_shards: int = 1  # replay shard processes (per group)
    learners: int = 1  # learner processes (see training.num_learners: data parallel)
    evaluators: int = 1  # 0: none (the learner then stops the job itself)
    peers: int = 0  # dapo: learner peers, each with its own group
    # a job with tools (environment.kwargs.tools): the processes that run their calls,
    # each in the sandbox; 0: the samplers and the evaluator run them themselves
    tool_servers: int = 1
    # a job with a learned reward model (environment.kwargs.reward = "model:PATH", or
    # reward_model): the processes that serve it, batching the samplers' requests
    reward_models: int = 1
    port_range: list[int] = field(default_factory=lambda: [29500, 29999])  # roles bind here
    registry_port: int = 0  # 0: the first port of port_range
    heartbeat_interval_s: float = 1.0  # every member beats to the registry this often
    heartbeat_liveness: int = 3  # missed heartbeats before a member counts as dead
    max_restarts: int = 3  # per role process, with exponential backoff
    max_restarts_per_role: dict[str, Any] = field(default_factory=dict)  # e.g. {sampler = 10}
    restart_backoff_s: float = 1.0  # the first restart is at once; then this, doubling to 60 s
    # up this long (or a trainer that updated since its start): its restart budget
    # and backoff start afresh
    restart_window_s: float = 600.0
    standby: list[str] = field(default_factory=lambda: list(TRAINER_ROLES))  # warm spares
    fork_server: bool = True  # local roles forked from one warm process (imports once)
    grace_s: float = 10.0  # between SIGTERM and SIGKILL when stopping
    python: str = ""  # interpreter on remote hosts (default python3)
    workdir: str = ""  # cd here on remote hosts before starting a role
    ssh_options: list[str] = field(default_factory=list)  # extra ssh arguments
    k8s: K8s = field(default_factory=K8s)  # verl-launch k8s: image, namespace, volume
    ray: RayTarget = field(default_factory=RayTarget)  # verl-launch ray: placement, timeout

    @property
    def liveness_timeout_s(self) -> float:
        """How long a member may stay silent before it counts as dead."""
        return self.heartbeat_interval_s * self.heartbeat_liveness


@dataclass(frozen=True)
class RoleResources:
    """What one role may use: threads, memory ("2GB"), GPUs, CPU priority."""

    cpu: int = 0  # threads; a learner's or peer's cores of its own (affinity); 0: default
    memory: str = ""  # empty: no limit
    gpu: int = 0  # GPUs of its host given to it alone (CUDA_VISIBLE_DEVICES)
    nice: int = 0  # 0-19: yield shared cores (samplers of a learner-bound job: learner first)


@dataclass(frozen=True)
class Resources:
    """Per-role resources, as the seed's `resources` section."""

    learner: RoleResources = field(default_factory=RoleResources)
    sampler: RoleResources = field(default_factory=RoleResources)
    replay: RoleResources = field(default_factory=RoleResources)
    evaluator: RoleResources = field(default_factory=RoleResources)
    peer: RoleResources = field(default_factory=RoleResources)
    toolserver: RoleResources = field(default_factory=RoleResources)
    rewardmodel: RoleResources = field(default_factory=RoleResources)
