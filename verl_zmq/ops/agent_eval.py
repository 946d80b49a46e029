"""`verl eval` of one policy of a multi-agent run: its agents acted for by the
checkpoint's policy, every other trained policy by its own checkpoint beside
it (checkpoints/<policy>/best.pt, else latest.pt; a random player where there
is none), fixed policies as the job has them; then games against the job's
references."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np


def _sibling(ckpt: Path, policy: str) -> Path | None:
    base = ckpt.parent.parent if ckpt.parent.name != "checkpoints" else ckpt.parent
    for name in ("best.pt", "latest.pt"):
        p = base / policy / name
        if p.exists():
            return p
    return None


def eval_agents(lp: Any, ckpt: Path, episodes: int, seed: int | None,
                deterministic: bool) -> Iterator[str]:
    """Lines to print: what played, the returns, the games against references."""
    from ..envs.agents import agents_of, mapping_fn, policy_spec
    from ..sampling.agents_eval import Player, head_to_head, play, raw_player
    from .export import load_policy

    job, ma = lp.job, lp.job.multiagent
    me = lp.meta["policy"]
    agents = agents_of(job.environment)
    first = job.evaluation.seed if seed is None else seed
    players: dict[str, Player] = {me: Player(lp.algo, lp.spec)}
    said = [f"{ckpt} ({job.algorithm.name} on {job.environment.id}, policy {me})"]
    for p in ma.names:
        if p == me:
            continue
        fixed = ma.policy(p).fixed
        if fixed and not fixed.endswith(".pt"):
            players[p] = raw_player(fixed, agents, first)
            said.append(f"  {p}: fixed, {fixed}")
            continue
        other = Path(fixed) if fixed else _sibling(ckpt, p)
        if other is None:
            players[p] = raw_player("random", agents, first)
            said.append(f"  {p}: no checkpoint beside this one: random")
            continue
        olp = load_policy(other, p)
        players[p] = Player(olp.algo, policy_spec(job.environment, ma, p))
        said.append(f"  {p}: {other}")
    yield from said
    mapped = mapping_fn(ma)
    played = play(job.environment, agents, players, mapped, episodes, first, deterministic)
    team = [sum(r.values()) for r in played.returns]
    yield (f"episodes {episodes}  team return mean {np.mean(team):.2f}  std {np.std(team):.2f}"
           f"  illegal moves {played.illegal} of {played.moves}")
    for p in ma.names:
        per = [sum(v for a, v in r.items() if mapped(a, i) == p)
               for i, r in zip(played.episodes, played.returns, strict=True)]
        yield f"  {p}: return mean {np.mean(per):.2f}"
    for ref in ma.references:
        opp = players[ref] if ref in players else raw_player(ref, agents, first + 1)
        w, d, lo = head_to_head(job.environment, agents, players[me], opp, episodes,
                                first + 700_001, deterministic)
        yield f"  vs {ref}: wins {w}  draws {d}  losses {lo}"
