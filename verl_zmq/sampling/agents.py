"""A sampler's collector for a multi-agent env: copies of a PettingZoo env
stepped together, each agent acted for by the policy it is mapped to, and each
trained policy's experience cut into fragments of its own. No I/O.

Each trained policy has columns ("seats"): `seats` per env copy, each held in an
episode by one agent mapped to it (all of them; with a league, one, the learner,
and the others play past versions). A column has its own time: it gains a row
when its agent acts (an AEC env's agents take turns; a parallel env's act
together), its reward is what the agent earned until it acts again, and where
its agent's episode ends the next row is the NEXT_STEP row (`batch.py`) holding
the last observation and its value, marked invalid. A column whose agent is out
of the episode (left it early, or not mapped to this policy this time) is padded
with invalid rows so it keeps pace with the others. Once every column of a
policy holds T + 1 rows, the first T are a fragment and row T is its bootstrap
(and stays, the next fragment's first row).

Agents that do not learn act too: fixed policies ("random": uniformly among
legal actions; a scripted `module:fn`; a checkpoint), and with
`multiagent.league` the past versions of a trained policy a sampler keeps (a
snapshot every `snapshot_every` updates), drawn each episode uniformly or by how
often they beat the learner.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..batch import job_layout
from ..config import Job
from ..config.multiagent import RANDOM, MultiAgent
from ..envs.agents import (
    AGENT_INDEX,
    STATE,
    AgentEnv,
    agents_of,
    make_agent_env,
    mapping_fn,
    mask_of,
    policy_agents,
    policy_spec,
)
from ..envs.make import env_seeds
from ..envs.spaces import split
from ..envs.spec import EnvSpec
from .league import League, RandomPolicy, ScriptedPolicy
from .seats import Seats, take_rows

Arrays = dict[str, np.ndarray]


def observe(spec: EnvSpec, raws: list[Any], agents: list[int], n_agents: int,
            states: list[np.ndarray] | None) -> Any:
    """A policy's observations of several agents: the env's, split into the
    policy's columns, with each agent's one-hot index and the critic's state
    where the spec has them (a plain observation: one [B, ...] array)."""
    if not spec.structured:
        return np.stack([np.asarray(r, np.float32) for r in raws])
    own = [leaf for leaf in spec.leaves if leaf.path[:1] not in ((AGENT_INDEX,), (STATE,))
           or len(leaf.path) > 1]
    out: dict[str, np.ndarray] = {}
    if len(own) == 1 and not own[0].path:
        out["obs"] = np.stack([np.asarray(r, np.float32) for r in raws])
    else:
        rows = [split(r, tuple(own)) for r in raws]
        out = {leaf.column: np.stack([row[leaf.column] for row in rows]) for leaf in own}
    for leaf in spec.leaves:
        if leaf.path == (AGENT_INDEX,):
            out[leaf.column] = np.eye(n_agents, dtype=np.float32)[agents]
        elif leaf.path == (STATE,):
            assert states is not None
            out[leaf.column] = np.stack(states).astype(np.float32)
    return out


# -- the collector ------------------------------------------------------------------------

@dataclass
class Held:
    """Who acts for one agent this episode: a policy's latest params (learning in
    `seat` of its columns, or not: seat -1), a league snapshot, or a fixed policy."""

    policy: str
    seat: int = -1
    snapshot: int = -1  # a league snapshot's updates (-1: the latest params)
    opponent: Any = None  # that snapshot's actor (kept while the episode lasts)


class MultiAgentCollector:
    """Steps `sampling.num_envs_per_worker` copies of a multi-agent env and cuts
    each trained policy's fragments (see the module)."""

    def __init__(self, job: Job, actors: dict[str, Any], worker: int, workers: int,
                 make_snapshot: Any = None):
        self.job, self.ma = job, job.multiagent
        ma: MultiAgent = self.ma
        self.actors = actors  # trained policy -> its copy of the latest params
        self.make_snapshot = make_snapshot  # policy, arrays -> an actor (the league's)
        self.agents = agents_of(job.environment)
        self.names = self.agents.names
        self.index = {a: i for i, a in enumerate(self.names)}
        self.trained = ma.trained
        self.specs = {p: policy_spec(job.environment, ma, p) for p in ma.names
                      if not ma.policy(p).fixed or ma.policy(p).fixed.endswith(".pt")}
        self.map = mapping_fn(ma)
        self.T = job.sampling.fragment_length
        self.copies_n = job.sampling.num_envs_per_worker
        self.seeds = env_seeds(job.experiment.seed, worker + 1, self.copies_n)
        self.rng = np.random.default_rng([job.experiment.seed, worker, 0x4D41])
        self.fixed: dict[str, Any] = {}
        for p in ma.names:
            how = ma.policy(p).fixed
            if how == RANDOM:
                self.fixed[p] = RandomPolicy(self.agents, int(self.rng.integers(2**31)))
            elif how and not how.endswith(".pt"):
                self.fixed[p] = ScriptedPolicy(how, f"multiagent.policies.{p}.fixed",
                                               int(self.rng.integers(2**31)))
            elif how:
                self.fixed[p] = actors[p]  # a checkpoint's policy, loaded by the role
        league = ma.league
        self.leagues = {p: League(league.snapshot_every, league.size, league.sampling,
                                  league.latest, fixed=self._opponents(),
                                  fixed_share=league.opponent_share) for p in self.trained}
        self.seats_per_copy = {p: (1 if league.snapshot_every > 0 else
                                   len(policy_agents(ma, self.agents, p)))
                               for p in self.trained}
        self.layouts = {p: job_layout(job.policy_view(p), self.specs[p]) for p in self.trained}
        self.seats = {p: Seats(self.layouts[p], self.copies_n * self.seats_per_copy[p],
                               tuple(job.traits.extras)) for p in self.trained}
        self.envs = [AgentEnv(make_agent_env(job.environment), s) for s in self.seeds]
        self.held: list[dict[str, Held]] = [{} for _ in self.envs]
        self.last_obs: list[dict[str, Any]] = [{} for _ in self.envs]
        self.team: list[dict[str, float]] = [{} for _ in self.envs]  # episode returns so far
        self.pending = [self._start(c) for c in range(len(self.envs))]
        # the Collector protocol's, for the first trained policy (what one-policy
        # code reads); per policy in `versions` and `pendings`
        self.versions = {p: 0 for p in self.trained}
        self.updates = {p: 0 for p in self.trained}
        self.pendings: dict[str, tuple[int, int, Arrays] | None] = {p: None for p in self.trained}
        self.E = self.copies_n
        self.steps = 0
        self.agent_steps = 0
        self.swaps = 0
        self.rejected_params = 0
        self.team_returns: deque[float] = deque(maxlen=100)
        self.policy_returns: dict[str, deque[float]] = {p: deque(maxlen=100) for p in ma.names}
        self.illegal = 0

    def _opponents(self) -> list[tuple[int, Any]]:
        """The league's fixed opponents, keyed -2, -3, ..."""
        out = []
        for i, name in enumerate(self.ma.league.opponents):
            if name in self.fixed:
                player = self.fixed[name]
            elif name == RANDOM:
                player = RandomPolicy(self.agents, int(self.rng.integers(2**31)))
            else:
                player = ScriptedPolicy(name, f"multiagent.league.opponents[{i}]",
                                        int(self.rng.integers(2**31)))
            out.append((-2 - i, player))
        return out

    # -- the Collector protocol's per-policy params ---------------------------------------

    @property
    def version(self) -> int:
        return self.versions[self.trained[0]]

    def offer(self, policy: str, version: int, updates: int, arrays: Arrays) -> None:
        """Params a trained policy's learner published (swapped in before acting)."""
        self.pendings[policy] = (version, updates, arrays)

    def swap(self) -> None:
        for p, pending in self.pendings.items():
            if pending is None or pending[0] == self.versions[p]:
                continue
            self.pendings[p] = None
            version, updates, arrays = pending
            try:
                self.actors[p].load_policy_arrays(arrays)
            except ValueError:
                self.rejected_params += 1
                continue
            self.versions[p], self.updates[p] = version, updates
            self.swaps += 1
            if self.make_snapshot is not None:
                self.leagues[p].offer(updates, lambda p=p, a=arrays: self.make_snapshot(p, a))

    # -- episodes --------------------------------------------------------------------------

    def _start(self, c: int) -> dict[str, Any]:
        """Reset copy c and decide who acts for each agent this episode."""
        env = self.envs[c]
        polled = env.reset()
        episode = env.episodes
        by_policy: dict[str, list[str]] = {}
        for a in self.names:
            by_policy.setdefault(self.map(a, episode), []).append(a)
        held: dict[str, Held] = {}
        for p, mine in by_policy.items():
            if p not in self.trained:
                held.update({a: Held(p) for a in mine})
                continue
            k = self.seats_per_copy[p]
            if self.ma.league.snapshot_every > 0:
                learner = mine[int(self.rng.integers(len(mine)))]
                for a in mine:
                    if a == learner:
                        held[a] = Held(p, c * k)
                    else:
                        snap = self.leagues[p].draw(self.rng)
                        held[a] = Held(p) if snap is None else Held(p, -1, *snap)
            else:
                for j, a in enumerate(mine):
                    held[a] = Held(p, c * k + j if j < k else -1)
        self.held[c] = held
        self.last_obs[c] = dict(polled.act)
        self.team[c] = {}
        return dict(polled.act)

    def _outcome(self, c: int) -> None:
        """An episode of copy c ended: its returns, and the league's record."""
        team = self.team[c]
        self.team_returns.append(float(sum(team.values())))
        per: dict[str, float] = {}
        for a, h in self.held[c].items():
            per[h.policy] = per.get(h.policy, 0.0) + team.get(a, 0.0)
        for p, r in per.items():
            self.policy_returns[p].append(r)
        for p in self.trained:  # the learner's score against its snapshot opponents
            mine = [a for a, h in self.held[c].items() if h.policy == p]
            learner = [a for a in mine if self.held[c][a].seat >= 0]
            snaps = {self.held[c][a].snapshot for a in mine if self.held[c][a].snapshot >= 0}
            if learner and snaps:
                mine_r = team.get(learner[0], 0.0)
                other = max(team.get(a, 0.0) for a in mine if a != learner[0])
                score = 1.0 if mine_r > other else 0.5 if mine_r == other else 0.0
                for s in snaps:
                    self.leagues[p].result(s, score)

    # -- acting ----------------------------------------------------------------------------

    def _state(self, c: int) -> np.ndarray:
        return self.envs[c].state(self.names, self.last_obs[c])

    def _act(self, who: str, snapshot: int, rows: list[tuple[int, str, Any]],
             opponent: Any = None) -> tuple[np.ndarray, Arrays, Any]:
        """Actions of the agents `rows` (copy, agent, raw obs) by one actor (a league
        snapshot's where `opponent` is one); its extras, and the observations it
        acted on (None for a fixed raw policy)."""
        actor = opponent if opponent is not None else \
            self.fixed.get(who) or self.actors[who]
        if isinstance(actor, RandomPolicy | ScriptedPolicy):
            return np.asarray([actor.act_raw(a, raw) for _, a, raw in rows]), {}, None
        spec = self.specs[who]
        states = [self._state(c) for c, _, _ in rows] if spec.critic_only else None
        obs = observe(spec, [raw for _, _, raw in rows], [self.index[a] for _, a, _ in rows],
                      len(self.names), states)
        a, ex = actor.act(obs, env_steps=self.agent_steps)
        return a, ex, obs

    def _legal(self, a: np.ndarray, rows: list[tuple[int, str, Any]]) -> None:
        for act, (_, agent, raw) in zip(a, rows, strict=True):
            legal = mask_of(raw, int(getattr(self.agents.act[agent], "n", 0)))
            if legal is not None and legal.any() and not legal[int(act)]:
                self.illegal += 1

    def _tick(self) -> None:
        """Every copy's agents that must act do; every copy steps once."""
        groups: dict[tuple[str, int], list[tuple[int, str, Any]]] = {}
        opponents: dict[tuple[str, int], Any] = {}
        for c, acting in enumerate(self.pending):
            for agent, raw in acting.items():
                h = self.held[c][agent]
                groups.setdefault((h.policy, h.snapshot), []).append((c, agent, raw))
                opponents[(h.policy, h.snapshot)] = h.opponent
        actions: list[dict[str, Any]] = [{} for _ in self.envs]
        for (who, snap), rows in groups.items():
            a, ex, obs = self._act(who, snap, rows, opponents[(who, snap)])
            self._legal(a, rows)
            env_a = self.actors[who].env_action(a) if who in self.actors else a
            for i, (c, agent, _) in enumerate(rows):
                actions[c][agent] = env_a[i].item() if np.ndim(env_a[i]) == 0 else env_a[i]
            if who in self.seats and snap < 0:
                seat = np.array([self.held[c][agent].seat for c, agent, _ in rows])
                learn = np.flatnonzero(seat >= 0)
                if learn.size:
                    s = self.seats[who]
                    s.decide(seat[learn], take_rows(obs, learn), a[learn],
                             {k: v[learn] for k, v in ex.items()},
                             np.array([self.index[rows[i][1]] for i in learn]))
                    s.count_step(seat[learn])
            self.agent_steps += len(rows)
        ended: dict[str, list[tuple[int, str, Any, bool, bool]]] = {}
        for c, env in enumerate(self.envs):
            if not actions[c]:
                continue
            polled = env.step(actions[c])
            self._after(c, polled, ended)
        self._finish(ended)
        for c, env in enumerate(self.envs):
            if env.over:
                self._outcome(c)
                self.pending[c] = self._start(c)
        for s in self.seats.values():
            s.pad()
        self.steps += 1

    def _after(self, c: int, polled: Any, ended: dict[str, list[Any]]) -> None:
        held, team = self.held[c], self.team[c]
        for a, r in polled.rewards.items():
            team[a] = team.get(a, 0.0) + r
            h = held.get(a)
            if h is not None and h.seat >= 0 and h.snapshot < 0 and h.policy in self.seats:
                self.seats[h.policy].reward(h.seat, r)
        for a, (obs, te, tr) in polled.ended.items():
            self.last_obs[c][a] = obs
            h = held.get(a)
            if h is not None and h.seat >= 0 and h.policy in self.seats:
                ended.setdefault(h.policy, []).append((c, a, obs, te, tr))
        self.last_obs[c].update(polled.act)
        self.pending[c] = dict(polled.act)

    def _finish(self, ended: dict[str, list[tuple[int, str, Any, bool, bool]]]) -> None:
        """The NEXT_STEP rows of the learners whose episode ended: the value of their
        last observation."""
        for p, rows in ended.items():
            a, ex, obs = self._act(p, -1, [(c, ag, o) for c, ag, o, _, _ in rows])
            seat = np.array([self.held[c][ag].seat for c, ag, _, _, _ in rows])
            self.seats[p].end(seat, np.array([te for *_, te, _ in rows]),
                              np.array([tr for *_, tr in rows]), obs, a, ex,
                              np.array([self.index[ag] for _, ag, _, _, _ in rows]))

    def collect_ready(self) -> list[tuple[str, Arrays, int]]:
        """Step until some trained policy's fragment is complete: [(policy, arrays,
        version)], each a fragment of its own layout."""
        self.swap()
        sync_every = max(1, self.job.sampling.sync_interval_steps // max(1, self.E))
        while True:
            out = [(p, s.take(self.layouts[p].obs_columns), self.versions[p])
                   for p, s in self.seats.items() if s.ready()]
            if out:
                return out
            self._tick()
            if self.steps % sync_every == 0:
                self.swap()

    def collect(self) -> tuple[Any, int]:
        raise TypeError("a multi-agent collector's fragments are per policy: collect_ready")

    def infos_taken(self) -> dict[str, list[float]]:
        return {}

    def metrics(self) -> dict[str, float]:
        out: dict[str, float] = {"sampler/agent_steps": float(self.agent_steps),
                                 "sampler/illegal_actions": float(self.illegal)}
        if self.team_returns:
            out["sampler/team_return_mean"] = round(float(np.mean(self.team_returns)), 3)
        for p, r in self.policy_returns.items():
            if r:
                out[f"sampler/return/{p}"] = round(float(np.mean(r)), 3)
        for p, lg in self.leagues.items():
            if lg.snaps:
                out[f"sampler/league/{p}/snapshots"] = float(len(lg.snaps))
                games = sum(r[1] for r in lg.record.values())
                if games:
                    out[f"sampler/league/{p}/win_rate"] = round(
                        sum(r[0] for r in lg.record.values()) / games, 3)
        return out

    def regroup(self, index: int, count: int) -> None:
        """Envs are this sampler's own: nothing is shared."""

    def close(self) -> None:
        for env in self.envs:
            env.close()
