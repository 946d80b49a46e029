"""The algorithms, one row each: the name a job gives, the module that holds the
class (`ALGORITHM` in it), its `[algorithm.params]` dataclass, its traits (what
the rest of the system may know of it without importing it), and a shipped job
to start one from. `ALGO_PARAMS`, the choices of `algorithm.name` and every
trait lookup derive from ALGORITHMS: adding an algorithm is its own module and
one row here. Torch-free: the launcher, the registry, the shards and the config
checks read it. Nothing compares `algorithm.name` with a literal: it asks these
traits.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..importing import load_object
from .algo_params import DAPOParams, DQNParams, GRPOParams, Params, PPOParams, SACParams

if TYPE_CHECKING:
    from .sections import Job


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
    # its policy network may be one of one's own (`policy.network`: a PolicyNet's heads)
    own_networks: bool = False

    @property
    def replay_modes(self) -> tuple[str, ...]:
        return ("fifo",) if self.on_policy else ("uniform", "prioritized")


@dataclass(frozen=True)
class Row:
    """One algorithm of the table."""

    name: str
    module: str  # the module whose `ALGORITHM` is the class
    params: type[Params]
    traits: Traits
    example: str = ""  # a shipped job (in the repository's configs/) to start from
    attr: str = "ALGORITHM"  # the class's name in `module`


PG: dict[str, Any] = dict(on_policy=True, extras=("logp", "value"), learns_from_demos=True,
                          numpy_actor="pg", encoders=True, recurrent=True, own_networks=True)

ALGORITHMS: dict[str, Row] = {r.name: r for r in (
    Row("ppo", "verl_zmq.algos.ppo", PPOParams, Traits(**PG), "configs/cartpole_ppo.toml"),
    Row("dapo", "verl_zmq.algos.dapo", DAPOParams,
        Traits(**PG, decentralised=True, filters_fragments=True), "configs/cartpole_dapo.toml"),
    # no critic: advantages from the rewards of a prompt's group of responses
    Row("grpo", "verl_zmq.algos.grpo", GRPOParams,
        Traits(on_policy=True, extras=("logp",), actions=("discrete",), grouped=True,
               filters_fragments=True), "configs/reverse_grpo.toml"),
    # Q(s, a) and max_a Q(s, a) at acting time: initial priorities (Ape-X)
    Row("dqn", "verl_zmq.algos.dqn", DQNParams,
        Traits(on_policy=False, extras=("q_taken", "q_max"), numpy_actor="q",
               actions=("discrete",), dueling=True, encoders=True, n_step=True),
        "configs/cartpole_dqn.toml"),
    Row("sac", "verl_zmq.algos.sac", SACParams,
        Traits(on_policy=False, learns_from_demos=True, numpy_actor="squashed",
               actions=("box",), encoders=True), "configs/pendulum_sac.toml"),
)}
ALGO_PARAMS: dict[str, type[Params]] = {n: r.params for n, r in ALGORITHMS.items()}
TRAITS: dict[str, Traits] = {n: r.traits for n, r in ALGORITHMS.items()}
NAMES: tuple[str, ...] = tuple(ALGORITHMS)


def row(name: str) -> Row:
    """The table's row of a named algorithm, or of one's own (`module:Class`, see
    `own_row`); KeyError naming the names when unknown."""
    if name in ALGORITHMS:
        return ALGORITHMS[name]
    if ":" in name:
        try:
            return own_row(name)
        except ValueError as e:
            raise KeyError(str(e)) from None
    raise KeyError(f"algorithm.name: unknown algorithm {name!r} "
                   f"(one of {', '.join(sorted(ALGORITHMS))}, or a \"module:Class\" of "
                   f"your own)")


@functools.cache
def own_row(path: str) -> Row:
    """An algorithm of one's own, `algorithm.name = "module:Class"`: a class that
    implements the `Algorithm` contract (algos/base.py) and declares its
    `params_class` (a `Params` dataclass: its `[algorithm.params]`) and its `traits`
    (what the rest of the system may know of it). Its module is imported wherever
    the job is read (the launcher included): keep torch imports inside it cheap, or
    accept their cost there. ValueError naming the key when it is not one."""
    cls = load_object(path, "algorithm.name")
    params, traits = getattr(cls, "params_class", None), getattr(cls, "traits", None)
    if not isinstance(cls, type):
        raise ValueError(f"algorithm.name {path!r}: expected a class, got "
                         f"{type(cls).__name__}")
    if not (isinstance(params, type) and issubclass(params, Params)
            and dataclasses.is_dataclass(params)):
        raise ValueError(f"algorithm.name {path!r}: the class must declare params_class, a "
                         f"dataclass deriving from verl_zmq.config.Params (its "
                         f"[algorithm.params])")
    if not isinstance(traits, Traits):
        raise ValueError(f"algorithm.name {path!r}: the class must declare traits, a "
                         f"verl_zmq.config.Traits (on_policy, extras, ...)")
    module, _, attr = path.partition(":")
    return Row(path, module, params, traits, attr=attr)


def example_job(name: str) -> str:
    return ALGORITHMS[name].example if name in ALGORITHMS else "configs/"


def traits(name: str) -> Traits:
    """The traits of a named algorithm; KeyError naming the key when unknown."""
    return row(name).traits


def filters_fragments(job: Job) -> bool:
    """Whether the job's learner may drop fragments before an update (and draw more)."""
    return traits(job.algorithm.name).filters_fragments and \
        job.algorithm.params.drops_fragments()


def fill_batches(job: Job) -> int:
    """How many batches the job's learner may draw for one update."""
    return job.algorithm.params.fill_batches() if filters_fragments(job) else 1


def n_step(job: Job) -> int:
    """The n of the n-step returns the job's replay shards compute (1: one step)."""
    return job.algorithm.params.n_step_returns() if traits(job.algorithm.name).n_step else 1


def numpy_acting(job: Job) -> bool:
    """Whether the job's policy acts in numpy (`sampling.inference`): the built-in
    MLPs under "auto", or "numpy" (the launcher asks, to fork samplers without torch)."""
    how = job.sampling.inference
    return how == "numpy" or (how == "auto" and bool(job.traits.numpy_actor))
