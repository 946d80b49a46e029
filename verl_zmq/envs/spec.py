"""What the networks and the fragment's layout need to know of an env: its
spaces, as `EnvSpec`. Torch-free."""

from __future__ import annotations

from dataclasses import dataclass

from .spaces import Leaf, plain


@dataclass(frozen=True)
class EnvSpec:
    """What the networks need to know of an env's spaces. `obs_shape` is a plain
    observation's shape, or for a structured one (`obs`: its leaves, see
    `spaces.py`) the flat features' `(width,)`. `n_actions` is the number of
    actions (Discrete), the action dimension (Box), or the policy's logits
    (MultiDiscrete: the sum of `nvec`; MultiBinary: one per bit)."""

    obs_shape: tuple[int, ...]
    discrete: bool
    n_actions: int
    action_shape: tuple[int, ...]
    action_low: tuple[float, ...] = ()
    action_high: tuple[float, ...] = ()
    obs: tuple[Leaf, ...] = ()  # () : one Box leaf of obs_shape
    action_kind: str = ""  # "" : "discrete" or "box", as `discrete` says
    nvec: tuple[int, ...] = ()  # MultiDiscrete: each action's number of choices
    # responses a family generates from prompts (no env): the tokens of each one's
    # left-padded prompt, a column of the fragment (`batch.Layout`); 0 for envs
    prompt_len: int = 0
    # multi-turn responses with tools: a [T, E] column marks the tokens a tool wrote
    # (attended to, never learned from; `seq/agent_loop.py`)
    observed: bool = False
    # a leaf (its column) of legal actions, 1 where legal, as wide as the logits:
    # the policy's logits are masked with it wherever it acts or is scored
    mask: str = ""
    # leaves (columns) the value function reads and the policy does not: a
    # centralised critic's state, the last leaves of the observation
    critic_only: tuple[str, ...] = ()
    # a multi-agent policy: the indices (in the env's `possible_agents`) of the
    # agents that may act for it; () for a single-agent env
    agents: tuple[int, ...] = ()

    @property
    def leaves(self) -> tuple[Leaf, ...]:
        return self.obs or (Leaf((), "box", self.obs_shape),)

    @property
    def actor_width(self) -> int:
        """Features the policy reads: all but the critic-only leaves (last)."""
        if not self.critic_only:
            return int(self.obs_shape[0]) if self.structured else 0
        return sum(leaf.width for leaf in self.leaves if leaf.column not in self.critic_only)

    @property
    def mask_slice(self) -> tuple[int, int] | None:
        """Where the action mask lies in the flat features (what off-policy batches
        and DQN's networks read), or None without one."""
        at = 0
        for leaf in self.leaves:
            if leaf.column == self.mask:
                return at, at + leaf.width
            at += leaf.width
        return None

    @property
    def structured(self) -> bool:
        """Observations are {column: array} (Dict, Tuple, Discrete, MultiBinary)."""
        return not plain(self.leaves)

    @property
    def images(self) -> tuple[Leaf, ...]:
        """Leaves a convolutional encoder reads, in a structured observation."""
        return tuple(leaf for leaf in self.leaves if leaf.kind == "image") \
            if self.structured else ()

    @property
    def kind(self) -> str:
        return self.action_kind or ("discrete" if self.discrete else "box")

    @property
    def continuous(self) -> bool:
        return self.kind == "box"
