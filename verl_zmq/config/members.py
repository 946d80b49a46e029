"""Which role processes a job has (ids, groups), in start order. Light: the
launcher plans with it."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from . import Job
from .roles import EVALUATOR, LEARNER, PEER, REGISTRY, REPLAY, REWARDMODEL, SAMPLER, TOOLSERVER


@dataclass
class RoleSpec:
    """One role to start: what it is and who it is."""

    role: str
    member_id: str
    group: str = "main"


def tool_servers(job: Job) -> int:
    """How many tool servers a job has: `launch.tool_servers` where its prompts'
    responses call tools (`environment.kwargs.tools`), else none."""
    return job.launch.tool_servers if job.environment.kwargs.get("tools") else 0


def reward_models(job: Job) -> int:
    """How many reward-model servers a job has: `launch.reward_models` where its
    prompts are scored by a learned model (`environment.kwargs.reward = "model:..."`
    or `reward_model`), else none."""
    kw = job.environment.kwargs
    learned = str(kw.get("reward", "")).startswith("model:") or bool(kw.get("reward_model"))
    return job.launch.reward_models if learned else 0


def default_specs(job: Job) -> list[RoleSpec]:
    """Every role of a job, registry first, then learners (or peers), shards,
    evaluators, samplers, tool servers and reward-model servers (the job's: any
    group's requests). DAPO:
    one group per peer, each with its own shard and `sampling.num_workers` samplers.
    Several trained policies of a multi-agent job: a group per policy, its learner
    (DAPO: its peer) and shards; samplers and evaluators in the first one's (they
    serve every policy)."""
    L = job.launch
    specs = [RoleSpec(REGISTRY, REGISTRY)]
    servers = [RoleSpec(TOOLSERVER, f"{TOOLSERVER}-{i}") for i in range(tool_servers(job))]
    servers += [RoleSpec(REWARDMODEL, f"{REWARDMODEL}-{i}") for i in range(reward_models(job))]
    trained = job.multiagent.trained
    if job.traits.decentralised and len(trained) <= 1:
        n = max(L.peers, 1)
        specs += [RoleSpec(PEER, f"peer-{p}", f"peer{p}") for p in range(n)]
        specs += [RoleSpec(REPLAY, f"replay-{p}", f"peer{p}") for p in range(n)]
        specs += [RoleSpec(EVALUATOR, f"evaluator-{e}", "peer0") for e in range(L.evaluators)]
        per = job.sampling.num_workers
        specs += [RoleSpec(SAMPLER, f"sampler-{p * per + i}", f"peer{p}")
                  for p in range(n) for i in range(per)]
        return specs + servers
    if len(trained) > 1:  # several trained policies: a learner (or peer) and shards each
        first = job.multiagent.group_of(trained[0])
        # a DAPO peer has one shard, as in the single-agent topology
        role, shards = (PEER, 1) if job.traits.decentralised else (LEARNER, L.replay_shards)
        specs += [RoleSpec(role, f"{role}-{i}", job.multiagent.group_of(p))
                  for i, p in enumerate(trained)]
        specs += [RoleSpec(REPLAY, f"replay-{i * shards + j}", job.multiagent.group_of(p))
                  for i, p in enumerate(trained) for j in range(shards)]
        specs += [RoleSpec(EVALUATOR, f"evaluator-{i}", first) for i in range(L.evaluators)]
        specs += [RoleSpec(SAMPLER, f"sampler-{i}", first)
                  for i in range(job.sampling.num_workers)]
        return specs + servers
    learners = max(L.learners, job.training.num_learners)  # one group of data-parallel ranks
    specs += [RoleSpec(LEARNER, f"learner-{i}") for i in range(learners)]
    specs += [RoleSpec(REPLAY, f"replay-{i}") for i in range(L.replay_shards)]
    specs += [RoleSpec(EVALUATOR, f"evaluator-{i}") for i in range(L.evaluators)]
    specs += [RoleSpec(SAMPLER, f"sampler-{i}") for i in range(job.sampling.num_workers)]
    return specs + servers


def index_of(member_id: str) -> int:
    """`sampler-3` -> 3: the index that seeds envs and picks exploration."""
    tail = member_id.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def acting_seeds(job_seed: int, group: str, index: int) -> tuple[int, int]:
    """(torch seed, numpy seed) of one sampler's action noise: distinct for every
    (job seed, group, worker index), so samplers never explore in lock-step (the
    networks' initial weights come from the job seed alone, identical everywhere)."""
    import numpy as np  # here: the launcher plans without numpy

    ss = np.random.SeedSequence([job_seed, zlib.crc32(group.encode()), index])
    t, n = ss.generate_state(2, dtype=np.uint32)
    return int(t), int(n)
