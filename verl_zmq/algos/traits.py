"""What roles, the launcher and the config checks may know of an algorithm.

Torch-free, so the registry, replay shards and the launcher can read it without
importing an algorithm. Roles never compare `algorithm.name` with a literal:
they ask these traits.
"""

from __future__ import annotations

from dataclasses import dataclass


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

    @property
    def replay_modes(self) -> tuple[str, ...]:
        return ("fifo",) if self.on_policy else ("uniform", "prioritized")


TRAITS: dict[str, Traits] = {
    "ppo": Traits(on_policy=True, extras=("logp", "value"), learns_from_demos=True,
                  numpy_actor="pg"),
    "dapo": Traits(on_policy=True, extras=("logp", "value"), decentralised=True,
                   learns_from_demos=True, numpy_actor="pg"),
    # Q(s, a) and max_a Q(s, a) at acting time: initial priorities (Ape-X)
    "dqn": Traits(on_policy=False, extras=("q_taken", "q_max"), numpy_actor="q"),
    "sac": Traits(on_policy=False, learns_from_demos=True, numpy_actor="squashed"),
}


def traits(name: str) -> Traits:
    """The traits of a named algorithm; KeyError naming the key when unknown."""
    if name not in TRAITS:
        raise KeyError(f"algorithm.name: unknown algorithm {name!r} "
                       f"(one of {', '.join(sorted(TRAITS))})")
    return TRAITS[name]
