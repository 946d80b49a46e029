"""Who a multi-agent sampler's learners play besides their own latest params:
fixed players (uniformly random legal actions; a scripted `module:fn`) and a
trained policy's league of past versions. Numpy only."""

from __future__ import annotations

import inspect
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..envs.agents import Agents, mask_of
from ..importing import load_object


class RandomPolicy:
    """Uniformly random legal actions (the space's sample where there is no mask)."""

    def __init__(self, agents: Agents, seed: int):
        self.agents = agents
        self.rng = np.random.default_rng(seed)

    def act_raw(self, agent: str, raw: Any) -> Any:
        space = self.agents.act[agent]
        legal = mask_of(raw, int(getattr(space, "n", 0)))
        if legal is not None and legal.any():
            return int(self.rng.choice(np.flatnonzero(legal)))
        space.seed(int(self.rng.integers(2**31)))
        return space.sample()


class ScriptedPolicy:
    """A `module:fn(observation, agent_id) -> action` of the job's. A function that
    also takes `rng` gets this player's own generator (seeded by `seed`), so the
    random part of its play differs from game to game yet repeats with the seed."""

    def __init__(self, path: str, where: str, seed: int = 0):
        self.fn = load_object(path, where)
        try:
            self.takes_rng = "rng" in inspect.signature(self.fn).parameters
        except (TypeError, ValueError):  # a builtin or C function: no signature to read
            self.takes_rng = False
        self.rng = np.random.default_rng(seed)

    def act_raw(self, agent: str, raw: Any) -> Any:
        if self.takes_rng:
            return self.fn(raw, agent, rng=self.rng)
        return self.fn(raw, agent)


@dataclass
class League:
    """A trained policy's past versions, kept by one sampler: snapshots of the
    params it received every `snapshot_every` updates, and the learner's record
    against each (for win_rate sampling)."""

    every: int
    size: int
    sampling: str
    latest: float
    snaps: deque[tuple[int, Any]] = field(default_factory=deque)  # (updates, actor)
    record: dict[int, list[float]] = field(default_factory=dict)  # updates -> [wins, games]
    last: int = -1  # updates of the newest snapshot
    fixed: list[tuple[int, Any]] = field(default_factory=list)  # (-2 - i, a fixed player)
    fixed_share: float = 0.0

    def offer(self, updates: int, make: Any) -> None:
        """Keep the params at `updates` as a snapshot when one is due."""
        if self.every <= 0 or (self.last >= 0 and updates < self.last + self.every):
            return
        self.snaps.append((updates, make()))
        self.last = updates
        while len(self.snaps) > self.size:
            old, _ = self.snaps.popleft()
            self.record.pop(old, None)

    def draw(self, rng: np.random.Generator) -> tuple[int, Any] | None:
        """An episode's opponent: None for the latest params, else a snapshot (or one
        of the fixed opponents, in `fixed_share` of the games)."""
        if self.fixed and rng.random() < self.fixed_share:
            return self.fixed[int(rng.integers(len(self.fixed)))]
        if not self.snaps or rng.random() < self.latest:
            return None
        if self.sampling == "uniform":
            return self.snaps[int(rng.integers(len(self.snaps)))]
        # prioritised fictitious self-play: weight (1 - win rate)^2, unseen ones first
        w = np.array([(1.0 - (r[0] + 0.5) / (r[1] + 1.0)) ** 2 for r in
                      (self.record.get(u, [0.0, 0.0]) for u, _ in self.snaps)])
        return self.snaps[int(rng.choice(len(w), p=w / w.sum()))]

    def result(self, updates: int, score: float) -> None:
        """The learner's score against snapshot `updates`: 1 a win, 0.5 a draw, 0."""
        if all(u != updates for u, _ in self.snaps):  # gone from the league meanwhile
            return
        r = self.record.setdefault(updates, [0.0, 0.0])
        r[0] += score
        r[1] += 1.0
