"""Whole episodes of a multi-agent env played by given policies: what the
evaluator, `verl eval` and the tools measure. Each episode runs on an env copy
of its own (seeded `seed + i`); every agent is acted for by the player an
`assign(agent, episode)` names. Players are actors of a policy (observing as
that policy does) or raw players (random, scripted). No I/O.

`Elo` turns wins, draws and losses against opponents of known rating into one
(a maximum-likelihood performance rating, with half a win and half a loss
added so that a clean sweep stays finite)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..config import Environment
from ..envs.agents import AgentEnv, Agents, make_agent_env, mask_of
from ..envs.spec import EnvSpec
from .agents import observe
from .league import RandomPolicy, ScriptedPolicy


@dataclass
class Player:
    """Who acts for an agent: an actor with the spec it observes by, or a raw one."""

    actor: Any
    spec: EnvSpec | None = None  # None: a raw player (act_raw on the env's observation)


@dataclass
class Played:
    """Episodes' outcomes: each episode's return per agent, the moves made and the
    illegal ones among them."""

    returns: list[dict[str, float]] = field(default_factory=list)
    episodes: list[int] = field(default_factory=list)  # which episode each return is
    moves: int = 0
    illegal: int = 0


def play(cfg: Environment, agents: Agents, players: dict[str, Player],
         assign: Callable[[str, int], str], episodes: int, seed: int,
         deterministic: bool = True, parallel: int = 16,
         progress: Callable[[int, int], None] | None = None) -> Played:
    """Play `episodes` episodes, `parallel` copies at a time (see the module)."""
    names = agents.names
    index = {a: i for i, a in enumerate(names)}
    out = Played()
    done = 0
    while done < episodes:
        n = min(parallel, episodes - done)
        envs = [AgentEnv(make_agent_env(cfg), seed + done + i) for i in range(n)]
        ids = [done + i for i in range(n)]
        pending = [env.reset().act for env in envs]
        last: list[dict[str, Any]] = [dict(p) for p in pending]
        totals: list[dict[str, float]] = [{} for _ in envs]
        live = list(range(n))
        while live:
            groups: dict[str, list[tuple[int, str, Any]]] = {}
            for c in live:
                for a, raw in pending[c].items():
                    groups.setdefault(assign(a, ids[c]), []).append((c, a, raw))
            actions: list[dict[str, Any]] = [{} for _ in envs]
            for who, rows in groups.items():
                pl = players[who]
                if pl.spec is None:
                    acts = np.asarray([pl.actor.act_raw(a, raw) for _, a, raw in rows])
                else:
                    states = [envs[c].state(names, last[c]) for c, _, _ in rows] \
                        if pl.spec.critic_only else None
                    obs = observe(pl.spec, [r for _, _, r in rows],
                                  [index[a] for _, a, _ in rows], len(names), states)
                    acts, _ = pl.actor.act(obs, deterministic=deterministic)
                    acts = pl.actor.env_action(acts)
                for act, (c, a, raw) in zip(acts, rows, strict=True):
                    legal = mask_of(raw, int(getattr(agents.act[a], "n", 0)))
                    out.moves += 1
                    if legal is not None and legal.any() and not legal[int(act)]:
                        out.illegal += 1
                    actions[c][a] = act.item() if np.ndim(act) == 0 else act
            for c in list(live):
                p = envs[c].step(actions[c])
                for a, r in p.rewards.items():
                    totals[c][a] = totals[c].get(a, 0.0) + r
                last[c].update(p.act)
                pending[c] = p.act
                if envs[c].over:
                    live.remove(c)
                    out.returns.append(totals[c])
                    out.episodes.append(ids[c])
                    if progress is not None:
                        progress(len(out.returns), episodes)
        for env in envs:
            env.close()
        done += n
    return out


def raw_player(how: str, agents: Agents, seed: int) -> Player:
    """A fixed player by name: "random", or a scripted `module:fn`."""
    if how == "random":
        return Player(RandomPolicy(agents, seed))
    return Player(ScriptedPolicy(how, f"multiagent reference {how!r}", seed))


def score(mine: float, theirs: float) -> float:
    """A game's score for `mine`: 1 a win, 0.5 a draw, 0 a loss."""
    return 1.0 if mine > theirs else 0.5 if mine == theirs else 0.0


def head_to_head(cfg: Environment, agents: Agents, a: Player, b: Player, games: int,
                 seed: int, deterministic: bool = True) -> tuple[int, int, int]:
    """(wins, draws, losses) of `a` against `b`, `a` taking each agent's seat in
    turn (game g: agent g mod n is `a`'s; every other agent `b`'s)."""
    names = agents.names
    players = {"a": a, "b": b}
    played = play(cfg, agents, players,
                  lambda agent, ep: "a" if agent == names[ep % len(names)] else "b",
                  games, seed, deterministic)
    w = d = lo = 0
    for g, ret in zip(played.episodes, played.returns, strict=True):
        me = names[g % len(names)]
        s = score(ret.get(me, 0.0), max(v for k, v in ret.items() if k != me)
                  if len(ret) > 1 else 0.0)
        w, d, lo = w + (s == 1.0), d + (s == 0.5), lo + (s == 0.0)
    return w, d, lo


def elo(results: list[tuple[float, int, int, int]]) -> float:
    """The rating that best explains (opponent rating, wins, draws, losses) against
    each opponent (see the module)."""
    games = [(r, w + 0.5 * d + 0.5, w + d + lo + 1.0) for r, w, d, lo in results
             if w + d + lo > 0]
    if not games:
        return math.nan

    def surplus(x: float) -> float:
        return sum(s - n / (1.0 + 10 ** ((r - x) / 400.0)) for r, s, n in games)

    lo_x, hi_x = -4000.0, 4000.0
    for _ in range(60):  # surplus falls as x rises: bisection
        mid = 0.5 * (lo_x + hi_x)
        lo_x, hi_x = (mid, hi_x) if surplus(mid) > 0 else (lo_x, mid)
    return round(0.5 * (lo_x + hi_x), 1)

