"""What roles, the launcher and the config checks may know of an algorithm.

Torch-free, so the registry, replay shards and the launcher can read it without
importing an algorithm. Roles never compare `algorithm.name` with a literal:
they ask these traits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Traits:
    """What an algorithm declares about itself to the rest of the system."""

    on_policy: bool  # FIFO replay, fragments served once; else uniform/prioritised
    extras: tuple[str, ...] = ()  # per-step columns samplers record (and bootstrap_<k>)
    decentralised: bool = False  # gossip peers, no central learner
    learns_from_demos: bool = False  # [algorithm.bc] applies
    # which numpy policy a sampler may act with (actors.py): "pg" (categorical or
    # Gaussian, with value), "q" (epsilon-greedy Q), "squashed" (tanh Gaussian); ""
    # for none: samplers act with torch
    numpy_actor: str = ""
    # the action spaces it can act in (envs/spaces.py's kinds)
    actions: tuple[str, ...] = ("discrete", "box", "multidiscrete", "multibinary")
    recurrent: bool = False  # an LSTM/GRU policy (`policy.recurrent`) is possible
    dueling: bool = False  # a dueling Q head is possible
    # learns from groups of responses to one prompt: needs a sequence env whose
    # fragments hold whole groups (seq/env.py)
    grouped: bool = False
    encoders: bool = False  # a convolutional encoder may come first (image observations)
    # may drop fragments (or groups) before an update and draw more (DAPO's dynamic
    # sampling, `params.dynamic_sampling`; GRPO's `params.filter_groups`), up to
    # `params.max_fill_batches` batches
    filters_fragments: bool = False
    n_step: bool = False  # n-step returns (`params.n_step`) in the shards' transitions

    @property
    def replay_modes(self) -> tuple[str, ...]:
        return ("fifo",) if self.on_policy else ("uniform", "prioritized")


TRAITS: dict[str, Traits] = {
    "ppo": Traits(on_policy=True, extras=("logp", "value"), learns_from_demos=True,
                  numpy_actor="pg", encoders=True, recurrent=True),
    "dapo": Traits(on_policy=True, extras=("logp", "value"), decentralised=True,
                   learns_from_demos=True, numpy_actor="pg", encoders=True,
                   filters_fragments=True, recurrent=True),
    # no critic: advantages from the rewards of a prompt's group of responses
    "grpo": Traits(on_policy=True, extras=("logp",), actions=("discrete",), grouped=True,
                   filters_fragments=True),
    # Q(s, a) and max_a Q(s, a) at acting time: initial priorities (Ape-X)
    "dqn": Traits(on_policy=False, extras=("q_taken", "q_max"), numpy_actor="q",
                  actions=("discrete",), dueling=True, encoders=True, n_step=True),
    "sac": Traits(on_policy=False, learns_from_demos=True, numpy_actor="squashed",
                  actions=("box",), encoders=True),
}

# a shipped job of each algorithm (in the repository's configs/), to start one from
EXAMPLE_JOBS = {"ppo": "configs/cartpole_ppo.toml", "dapo": "configs/cartpole_dapo.toml",
                "grpo": "configs/reverse_grpo.toml", "dqn": "configs/cartpole_dqn.toml",
                "sac": "configs/pendulum_sac.toml"}


def example_job(name: str) -> str:
    return EXAMPLE_JOBS.get(name, "configs/")


SPACE_NAMES = {"discrete": "Discrete", "box": "Box", "multidiscrete": "MultiDiscrete",
               "multibinary": "MultiBinary"}


def filters_fragments(job: Any) -> bool:
    """Whether the job's learner may drop fragments before an update (and draw more)."""
    p = job.algorithm.params
    return bool(traits(job.algorithm.name).filters_fragments
                and (getattr(p, "dynamic_sampling", False) or getattr(p, "filter_groups", False)))


def fill_batches(job: Any) -> int:
    """How many batches the job's learner may draw for one update."""
    return int(job.algorithm.params.max_fill_batches) if filters_fragments(job) else 1


def n_step(job: Any) -> int:
    """The n of the n-step returns the job's replay shards compute (1: one step)."""
    return int(job.algorithm.params.n_step) if traits(job.algorithm.name).n_step else 1


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
            f"algorithm.policy.kind: a Hugging Face model is trained by grpo, not {name}"
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
    from ..seq import is_sequence_env, round_steps
    from ..seq.prompts import is_prompt_env, prompt_settings

    env, S = job.environment, job.sampling
    if is_prompt_env(env.id):
        return _prompt_problem(job, prompt_settings(env.kwargs))
    if job.algorithm.policy.kind == "hf":
        return (f"algorithm.policy.kind: a Hugging Face model answers prompt files "
                f"(environment.id = \"verl/Prompts-v0\"), not {env.id}")
    G = int(env.kwargs.get("group_size", 1))
    if not is_sequence_env(env.id) or G < 2:
        return (f"algorithm.name: {job.algorithm.name} needs a sequence task (verl/Reverse-v0, "
                f"verl/DigitSum-v0) with environment.kwargs.group_size >= 2")
    if env.vectorization == "sync" or env.step_timeout_s > 0 or env.max_episode_steps \
            or env.reward_fn:
        return (f"environment: {job.algorithm.name} needs the task's own vector env (its "
                f"groups): no vectorization = \"sync\", step_timeout_s, max_episode_steps "
                f"or reward_fn (a task's reward is environment.kwargs.reward)")
    R = round_steps(env.id, env.kwargs)
    if S.fragment_length % R or S.num_envs_per_worker % G:
        return (f"sampling: {job.algorithm.name} needs whole groups in every fragment: "
                f"fragment_length {S.fragment_length} a multiple of the task's round ({R} "
                f"steps) and num_envs_per_worker {S.num_envs_per_worker} a multiple of "
                f"environment.kwargs.group_size {G}")
    return ""


def _prompt_problem(job: Any, s: Any) -> str:
    """Why a prompt job's fragments would not be whole groups of whole responses."""
    S, pol = job.sampling, job.algorithm.policy
    if pol.kind != "hf":
        return ("algorithm.policy.kind: prompt files (verl/Prompts-v0) are answered by a "
                "Hugging Face model: kind = \"hf\"")
    if S.fragment_length != s.max_response_length or S.num_envs_per_worker % s.group_size:
        return (f"sampling: a prompt job's fragment is one column per response: "
                f"fragment_length {S.fragment_length} must equal "
                f"environment.kwargs.max_response_length {s.max_response_length}, and "
                f"num_envs_per_worker {S.num_envs_per_worker} (responses per fragment) be a "
                f"multiple of environment.kwargs.group_size {s.group_size}")
    if pol.lora_rank < 0:
        return "algorithm.policy.lora_rank: must be 0 (off) or more"
    return ""


def traits(name: str) -> Traits:
    """The traits of a named algorithm; KeyError naming the key when unknown."""
    if name not in TRAITS:
        raise KeyError(f"algorithm.name: unknown algorithm {name!r} "
                       f"(one of {', '.join(sorted(TRAITS))})")
    return TRAITS[name]


def numpy_acting(job: Any) -> bool:
    """Whether the job's policy acts in numpy (`sampling.inference`): the built-in
    MLPs under "auto", or "numpy" (the launcher asks, to fork samplers without torch)."""
    how = job.sampling.inference
    return how == "numpy" or (how == "auto" and bool(job.traits.numpy_actor))
