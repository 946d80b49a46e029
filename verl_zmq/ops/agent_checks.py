"""`verl check` of a multi-agent job: each policy's spaces from the agents mapped
to it, whether its algorithm fits them, its networks, what is not supported with
several agents yet, and a few episodes played with random legal actions."""

from __future__ import annotations

import dataclasses
import threading

from ..config import Job

PROBE_EPISODES = 2
PROBE_HANG_S = 30.0


def agent_job_problems(job: Job, networks: bool = True, probe_steps: int | None = None
                       ) -> list[str]:
    """Problems of a multi-agent job, each one sentence; empty when it can run."""
    from ..algos.traits import fit_problem
    from ..envs.agents import AgentEnvError, policy_spec
    from .plugin_checks import plugin_problems

    ma = job.multiagent
    problems: list[str] = []
    env = job.environment
    if env.normalize_obs:
        problems.append("environment.normalize_obs: not with a multi-agent env yet; set it "
                        "false")
    if job.algorithm.policy.recurrent:
        problems.append("algorithm.policy.recurrent: not with a multi-agent env yet")
    for p in ma.names:
        if ma.policy(p).fixed and not ma.policy(p).fixed.endswith(".pt"):
            continue
        try:
            spec = policy_spec(env, ma, p)
        except AgentEnvError as e:
            problems.append(str(e))
            continue
        view = job.policy_view(p)
        why = fit_problem(view, spec.kind, bool(spec.images))
        if why:
            problems.append(f"policy {p!r}: {why}")
        elif networks and p in ma.trained:
            try:
                from ..algos import make_algorithm

                make_algorithm(view, spec)
            except (ValueError, KeyError) as e:
                problems.append(f"policy {p!r}: {e}")
    if job.traits.decentralised:
        problems += _peer_problems(job)
    problems += plugin_problems(job)
    if problems or probe_steps == 0:
        return problems
    return _probe(job)


def _peer_problems(job: Job) -> list[str]:
    """A decentralised job's peers (one per trained policy) mix what they learn:
    their policies must share one network shape, so every trained policy's agents
    must observe and act alike (`multiagent.agent_index` tells them apart)."""
    from ..envs.agents import AgentEnvError, policy_spec

    ma = job.multiagent
    shapes = {}
    for p in ma.trained:
        try:
            s = policy_spec(job.environment, ma, p)
        except AgentEnvError:
            return []  # reported above
        shapes[p] = dataclasses.replace(s, agents=())  # the spec but for whose it is
    first = ma.trained[0]
    odd = [p for p in ma.trained if shapes[p] != shapes[first]]
    if odd:
        return [f"algorithm.name = {job.algorithm.name!r}: peers mix their policies, which "
                f"must share spaces; policy {odd[0]!r} observes or acts unlike {first!r} "
                f"(map agents of one kind to the trained policies, or use ppo)"]
    return []


def _probe(job: Job) -> list[str]:
    """A few episodes with random legal actions for every agent, in a thread with a
    deadline (an env that never answers must not hang the check)."""
    from ..envs.agents import agents_of, mapping_fn
    from ..sampling.agents_eval import play, raw_player

    out: list[str] = []
    cfg = job.environment

    def run() -> None:
        try:
            agents = agents_of(cfg)
            names = job.multiagent.names
            mapped = mapping_fn(job.multiagent)
            for a in agents.names:
                p = mapped(a, 1)
                if p not in names:
                    out.append(f"multiagent.mapping_fn: gave {p!r} for agent {a!r}, not a "
                               f"policy (policies: {', '.join(names)})")
                    return
            rnd = raw_player("random", agents, job.experiment.seed)
            play(cfg, agents, {"random": rnd}, lambda a, ep: "random", PROBE_EPISODES,
                 job.experiment.seed, parallel=PROBE_EPISODES)
        except Exception as e:  # the user's env or mapping raised: its own words
            out.append(f"environment {cfg.id!r}: {type(e).__name__}: {e} (raised while the "
                       f"check played {PROBE_EPISODES} episodes with random actions)")

    t = threading.Thread(target=run, name="env-check", daemon=True)
    t.start()
    t.join(PROBE_HANG_S)
    if t.is_alive():
        return [f"environment {cfg.id!r}: {PROBE_EPISODES} episodes with random actions "
                f"did not end within {PROBE_HANG_S:.0f} s"]
    return out
