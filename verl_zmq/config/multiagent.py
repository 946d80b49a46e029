"""`[multiagent]`: the policies of a PettingZoo env's agents, which policy acts
for which agent, which of them train, and self-play. Plain data: what the env's
agents are is learnt where it is built (`envs/agents.py`)."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Any, Literal

SHARED = "shared"  # the one policy of every agent when [multiagent] names none
RANDOM = "random"  # a fixed policy: uniformly random legal actions


@dataclass(frozen=True)
class AgentPolicy:
    """One policy of a multi-agent job (`[multiagent.policies.NAME]`)."""

    # "": trained; "random": uniformly random legal actions; "module:fn": scripted,
    # fn(observation, agent_id) -> action; a path ending in .pt: a checkpoint's policy
    fixed: str = ""
    # [algorithm.params] keys that differ for this policy (its learner's)
    params: dict[str, Any] = field(default_factory=dict)
    # its learner's budget in its agents' steps; 0: training.total_timesteps
    total_timesteps: int = 0


@dataclass(frozen=True)
class League:
    """Self-play against past versions of a trained policy."""

    # updates of a trained policy between snapshots kept as opponents; 0: no league
    # (every agent mapped to it plays the latest params, and all of them learn)
    snapshot_every: int = 0
    size: int = 8  # snapshots kept (the oldest goes first)
    # how an episode's opponent is drawn from the snapshots: uniformly, or by
    # win_rate: those the policy beats least are met most (prioritised fictitious play)
    sampling: Literal["uniform", "win_rate"] = "uniform"
    latest: float = 0.2  # chance an episode's opponent is the latest params, not a snapshot
    # fixed opponents met besides (a fixed policy's name, "random", a scripted
    # module:fn), in `opponent_share` of the games: what self-play alone never shows
    opponents: list[str] = field(default_factory=list)
    opponent_share: float = 0.1  # the share of games against `opponents`


@dataclass(frozen=True)
class MultiAgent:
    """Policies of a multi-agent env, their agents, and which of them learn."""

    # name -> its table; empty: one policy, "shared", acting for every agent
    policies: dict[str, AgentPolicy] = field(default_factory=dict)
    # agent-id glob -> policy, the first match wins; empty: every agent -> the first policy
    policy_mapping: dict[str, str] = field(default_factory=dict)
    # module:fn(agent_id, episode) -> policy name, called as each episode starts
    # (episode: that env copy's episode counter); overrides policy_mapping
    mapping_fn: str = ""
    train: list[str] = field(default_factory=list)  # trained policies; empty: every unfixed one
    agent_index: bool = False  # append the agent's one-hot index to its observation
    # the value function also reads the env's state() (every agent's observation,
    # concatenated, where the env has none); the policy acts on its own (MAPPO)
    centralised_critic: bool = False
    league: League = field(default_factory=League)
    # the evaluator's fixed opponents for wins, draws, losses and a rating: "random",
    # a scripted "module:fn", or a fixed policy's name; empty: no games against them
    references: list[str] = field(default_factory=list)
    games: int = 50  # evaluation games against each reference

    @property
    def names(self) -> list[str]:
        """Every policy, in the order of the job file."""
        return list(self.policies) or [SHARED]

    def policy(self, name: str) -> AgentPolicy:
        return self.policies.get(name, AgentPolicy())

    @property
    def trained(self) -> list[str]:
        """The policies that learn, in the job file's order."""
        if self.train:
            return [n for n in self.names if n in self.train]
        return [n for n in self.names if not self.policy(n).fixed]

    def map_agent(self, agent: str) -> str:
        """The policy `policy_mapping` gives an agent (mapping_fn is called where
        episodes run: `envs/agents.py`)."""
        for pattern, name in self.policy_mapping.items():
            if fnmatch.fnmatchcase(agent, pattern):
                return name
        return self.names[0]

    def group_of(self, policy: str) -> str:
        """The group a trained policy's learner and shard run in: "main" where one
        policy trains (the single-agent topology), else the policy's own name."""
        return "main" if len(self.trained) <= 1 else policy

    def checkpoint_folder(self, policy: str) -> str:
        """Where a trained policy's checkpoints and best.pt go under checkpoints/:
        there itself ("") where one policy trains, else a folder of its name."""
        return "" if len(self.trained) <= 1 else policy

    def policy_of_group(self, group: str) -> str:
        """The trained policy a group's learner and shard serve."""
        trained = self.trained
        if len(trained) <= 1:
            return trained[0] if trained else SHARED
        return group if group in trained else trained[0]


def multiagent_problems(ma: MultiAgent) -> list[str]:
    """What is wrong with a `[multiagent]` section on its own (each a sentence
    naming the key); the env's agents are checked where it is built."""
    out = []
    names = ma.names
    for name in ma.policies:
        if not name or not name.replace("_", "").replace("-", "").isalnum():
            out.append(f"multiagent.policies.{name}: a policy name is letters, digits, "
                       f"'-' and '_'")
    for pattern, name in ma.policy_mapping.items():
        if name not in names:
            out.append(f"multiagent.policy_mapping[{pattern!r}] = {name!r}: no such policy "
                       f"(policies: {', '.join(names)})")
    for name in ma.train:
        if name not in names:
            out.append(f"multiagent.train: {name!r} is not a policy (policies: "
                       f"{', '.join(names)})")
        elif ma.policy(name).fixed:
            out.append(f"multiagent.train: {name!r} is fixed ({ma.policy(name).fixed!r}); "
                       f"a trained policy has no `fixed`")
    if not ma.trained:
        out.append("multiagent: no policy trains; leave `fixed` off one of them")
    lg = ma.league
    if lg.snapshot_every < 0 or lg.size < 1 or not 0 <= lg.latest <= 1 \
            or not 0 <= lg.opponent_share <= 1:
        out.append("multiagent.league: snapshot_every >= 0, size >= 1, 0 <= latest <= 1 "
                   "and 0 <= opponent_share <= 1")
    if ma.games < 1:
        out.append("multiagent.games: at least 1")
    return out
