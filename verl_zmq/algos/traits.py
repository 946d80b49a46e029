"""Whether a job's algorithm and policy can act in its env (`fit_problem`), from
the algorithm table's traits (`config/algorithms.py`). Torch-free: the launcher
asks before any role starts, and the algorithms raise it as a ValueError.
"""

from __future__ import annotations

from typing import Any

from ..config.algorithms import TRAITS, Traits, traits

SPACE_NAMES = {"discrete": "Discrete", "box": "Box", "multidiscrete": "MultiDiscrete",
               "multibinary": "MultiBinary"}


def fit_problem(job: Any, kind: str, images: bool = False) -> str:
    """Why the job's algorithm and policy cannot act in its env (one whose action
    space is of `kind`, envs/spaces.py's kinds; `images`: image leaves in a
    structured observation), or "" when they can. Torch-free: the launcher asks
    before any role starts, and the algorithms raise it as a ValueError."""
    name, pol = job.algorithm.name, job.algorithm.policy
    t = traits(name)
    if kind not in t.actions:
        takers = sorted(a for a, x in TRAITS.items() if kind in x.actions)
        return (f"algorithm.name: {job.environment.id} has {SPACE_NAMES[kind]} actions, "
                f"which {name} does not take ({', '.join(takers)} do)")
    if pol.network and not t.own_networks:
        takers = sorted(a for a, x in TRAITS.items() if x.own_networks)
        return (f"algorithm.policy.network: a network of one's own is for "
                f"{', '.join(takers)}, not {name}")
    if pol.network and (pol.recurrent or pol.kind != "mlp" or pol.encoder != "mlp"):
        return ("algorithm.policy.network: a network of one's own replaces the built-in "
                "one whole: no recurrent, kind or encoder beside it")
    if pol.recurrent:
        why = _recurrent_problem(job, t)
        if why:
            return why
    if images and not t.recurrent:
        return (f"environment: {job.environment.id}'s observation holds images beside other "
                f"keys; {name} reads flat features only (ppo and dapo encode each key)")
    if pol.encoder != "mlp" and not t.encoders:
        return (f"algorithm.policy.encoder: convolutional encoders are for ppo, dapo, dqn "
                f"and sac; "
                f"{name} takes flat observations (\"mlp\")")
    if pol.dueling and not t.dueling:
        return f"algorithm.policy.dueling: a dueling head is for Q-networks (dqn), not {name}"
    if t.grouped:
        why = _group_problem(job)
        if why:
            return why
    return _kind_problem(name, pol, t, kind)


def _kind_problem(name: str, pol: Any, t: Traits, kind: str) -> str:
    """Why `policy.kind` does not fit the algorithm and its actions, or ""."""
    if pol.kind == "hf":
        return "" if t.grouped else \
            (f"algorithm.policy.kind: a Hugging Face model is trained by grpo, not {name}; for "
             f"PPO with a critic keep grpo and set algorithm.params.adv_estimator = \"gae\" "
             f"(a value head; verl's convention) and vf_coef")
    if pol.kind == "transformer":
        if not t.on_policy:
            return f"algorithm.policy.kind: a transformer policy is for ppo and grpo, not {name}"
        if kind != "discrete":
            return "algorithm.policy.kind: a transformer policy needs Discrete (token) actions"
        if pol.d_model < 1 or pol.n_layers < 1 or pol.n_heads < 1 or pol.d_model % pol.n_heads:
            return (f"algorithm.policy: d_model {pol.d_model} must be a multiple of n_heads "
                    f"{pol.n_heads}, with at least one layer")
        return ""
    if not pol.hidden_sizes:
        return "algorithm.policy.hidden_sizes: needs at least one layer"
    return ""


def _recurrent_problem(job: Any, t: Traits) -> str:
    """Why the job's recurrent policy cannot be, or ""."""
    name, pol = job.algorithm.name, job.algorithm.policy
    if not t.recurrent:
        takers = sorted(a for a, x in TRAITS.items() if x.recurrent)
        return (f"algorithm.policy.recurrent: recurrent policies are for "
                f"{', '.join(takers)}, not {name}")
    if pol.kind == "transformer":
        return "algorithm.policy.recurrent: a transformer policy has no recurrent core"
    if pol.recurrent_size < 1:
        return "algorithm.policy.recurrent_size: must be at least 1"
    if job.algorithm.bc.demos or job.algorithm.params.kl_coef > 0:
        return ("algorithm.policy.recurrent: a recurrent policy learns without "
                "demonstrations (algorithm.bc) and without a KL term (kl_coef)")
    rec, T = job.algorithm.params.recurrence, job.sampling.fragment_length
    if rec < 0 or (rec and T % rec):
        return (f"algorithm.params.recurrence: {rec} must divide sampling.fragment_length "
                f"{T} (0: whole fragments)")
    return ""


def _group_problem(job: Any) -> str:
    """Why the job's fragments would not hold whole groups of responses, or ""."""
    from ..envs.families import grouped, source

    env, S = job.environment, job.sampling
    if (src := source(env.id)) is not None:
        return src.fit_problem(job)
    if job.algorithm.policy.kind == "hf":
        return (f"algorithm.policy.kind: a Hugging Face model answers prompt files "
                f"(environment.id = \"verl/Prompts-v0\"), not {env.id}")
    G = int(env.kwargs.get("group_size", 1))
    g = grouped(env.id)
    if g is None or G < 2:
        return (f"algorithm.name: {job.algorithm.name} needs a sequence task (verl/Reverse-v0, "
                f"verl/DigitSum-v0) with environment.kwargs.group_size >= 2")
    if env.vectorization == "sync" or env.step_timeout_s > 0 or env.max_episode_steps \
            or env.reward_fn:
        return (f"environment: {job.algorithm.name} needs the task's own vector env (its "
                f"groups): no vectorization = \"sync\", step_timeout_s, max_episode_steps "
                f"or reward_fn (a task's reward is environment.kwargs.reward)")
    R = g.round_steps(env.kwargs)
    if S.fragment_length % R or S.num_envs_per_worker % G:
        return (f"sampling: {job.algorithm.name} needs whole groups in every fragment: "
                f"fragment_length {S.fragment_length} a multiple of the task's round ({R} "
                f"steps) and num_envs_per_worker {S.num_envs_per_worker} a multiple of "
                f"environment.kwargs.group_size {G}")
    return ""


