"""The evaluator of a multi-agent job: whole episodes with every agent acted for
by its policy (the trained ones on their newest params, deterministic where
`evaluation.deterministic`), reported as the team's return (summed over agents)
and each policy's. With `multiagent.references`, each trained policy also
plays `multiagent.games` games against each reference (random, a scripted
`module:fn`, a fixed policy) and against its best version so far, taking each
seat in turn: wins, draws, losses, and an Elo rating from them (random at 0;
a scripted reference rated against random once, at the start). The rating,
where there are references, is what ranks evaluations (best.pt, stop_at_return).
Illegal moves are counted (`eval/illegal_moves`): masked policies make none.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from pathlib import Path
from typing import Any

import numpy as np

from .. import wire
from ..config.multiagent import RANDOM
from ..envs.agents import agents_of, mapping_fn, policy_spec
from ..policy.numpy_actor import make_actor
from ..sampling.agents_eval import Player, elo, head_to_head, play, raw_player
from .evaluator import EvaluatorRole

RATING_GAMES = 200  # a scripted reference's games against random, for its rating
REFERENCE_SEEDS = 700_001  # reference games: seeds apart from the return's episodes


class MultiAgentEvaluator(EvaluatorRole):
    """Evaluates the joint policy of a multi-agent job (see the module)."""

    async def _acting(self) -> None:
        job, ma = self.job, self.job.multiagent
        seed = job.experiment.seed
        self.agents = agents_of(job.environment)
        self.map = mapping_fn(ma)
        self.players: dict[str, Player] = {}
        for p in ma.names:
            fixed = ma.policy(p).fixed
            if fixed and not fixed.endswith(".pt"):
                self.players[p] = raw_player(fixed, self.agents, seed)
                continue
            view = job.policy_view(p)
            spec = policy_spec(job.environment, ma, p)
            actor = make_actor(view, spec, (0, 1), (seed, seed),
                               threads=job.resources.evaluator.cpu or 1)
            if fixed:
                from .sampler_agents import _checkpoint_policy

                actor.load_policy_arrays(_checkpoint_policy(fixed))
            self.players[p] = Player(actor, spec)
        first = ma.trained[0]
        first_spec = self.players[first].spec
        assert first_spec is not None  # a trained policy observes by its spec
        self.spec = first_spec
        self.algo = self.players[first].actor
        self.rms = None
        self.member_groups: dict[str, str] = {}
        self.extra: dict[str, float] = {}
        self.rating = math.nan
        self.best_player: Player | None = None  # the first trained policy's best.pt
        self.best_rating = math.nan
        self.refs: dict[str, tuple[Player, float]] = {}
        for ref in ma.references:
            player = self.players[ref] if ref in self.players else \
                raw_player(ref, self.agents, seed + 1)
            self.refs[ref] = (player, 0.0)
        for ref, (player, _) in list(self.refs.items()):
            if ref != RANDOM:  # its rating against random, once
                rnd = raw_player(RANDOM, self.agents, seed + 2)
                w, d, lo = await asyncio.to_thread(
                    head_to_head, job.environment, self.agents, player, rnd, RATING_GAMES,
                    job.evaluation.seed + REFERENCE_SEEDS)
                self.refs[ref] = (player, elo([(0.0, w, d, lo)]))
                self.log.info("reference_rated", reference=ref, wins=w, draws=d, losses=lo,
                              rating=self.refs[ref][1])
        self.video_dir = ""

    def on_membership(self, members: dict[str, wire.Member]) -> None:
        super().on_membership(members)
        self.member_groups = {m.id: m.group for m in members.values()}

    def _policy_of(self, src: str) -> str:
        return self.job.multiagent.policy_of_group(self.member_groups.get(src, "main"))

    def _fp(self, src: str) -> str:
        return ""  # a joint evaluation depends on every policy's params: nothing cached

    def _live(self, msg: wire.Params) -> list[wire.Params]:
        # one joint evaluation plays every policy on its newest params, whoever's
        # (a DAPO peer per policy: each is credited when its own params arrive);
        # none before every trained policy's trainer has sent params (a policy on
        # no params of its trainer would be scored, and its best.pt never written)
        have = {self._policy_of(src) for src in self.held}
        return [msg] if set(self.job.multiagent.trained) <= have else []

    def _load(self, msg: wire.Params) -> bool:
        p = self._policy_of(msg.src)
        try:
            self.players[p].actor.load_policy_arrays(dict(msg.arrays))
        except ValueError as e:
            self.wire_stats.reject(msg.src, wire.WireError(f"params do not fit: {e}"))
            return False
        for src, (_, held) in self.held.items():  # every policy on its newest params
            q = self._policy_of(src)
            if q != p and q in self.players:
                with contextlib.suppress(ValueError):  # counted when it came
                    self.players[q].actor.load_policy_arrays(dict(held.arrays))
        return True

    def _play(self, episodes: int, seed: int, video_dir: str, prefix: str,
              infos: dict[str, list[float]] | None, progress: Any) -> np.ndarray:
        job, ma = self.job, self.job.multiagent
        det = job.evaluation.deterministic
        played = play(job.environment, self.agents, self.players, self.map, episodes, seed,
                      det, progress=progress)
        team = np.array([sum(r.values()) for r in played.returns])
        extra: dict[str, float] = {"eval/illegal_moves": float(played.illegal),
                                   "eval/moves": float(played.moves)}
        for p in ma.names:
            per = [sum(v for a, v in r.items() if self.map(a, i) == p)
                   for i, r in zip(played.episodes, played.returns, strict=True)]
            extra[f"eval/return/{p}"] = round(float(np.mean(per)), 4)
        if self.refs:
            first = ma.trained[0]
            me = self.players[first]
            results = []
            opponents = dict(self.refs)
            if self.best_player is not None:
                opponents["best"] = (self.best_player, self.best_rating)
            for ref, (player, rating) in opponents.items():
                w, d, lo = head_to_head(job.environment, self.agents, me, player, ma.games,
                                        seed + REFERENCE_SEEDS, det)
                n = max(1, w + d + lo)
                extra.update({f"eval/vs/{ref}/win": round(w / n, 4),
                              f"eval/vs/{ref}/draw": round(d / n, 4),
                              f"eval/vs/{ref}/loss": round(lo / n, 4)})
                results.append((rating, w, d, lo))
            self.rating = elo(results)
            extra["eval/rating"] = self.rating
        self.extra = extra
        return team

    def _score(self, rets: np.ndarray) -> float:
        return self.rating if self.refs and not math.isnan(self.rating) else float(rets.mean())

    def _extra(self) -> dict[str, float]:
        return dict(self.extra)

    def _best_params(self, msg: wire.Params) -> list[wire.Params]:
        """A joint evaluation's best is every trained policy's: the evaluated params
        and, for each other policy, the newest held of its trainer."""
        out = {self._policy_of(msg.src): msg}
        for src, (_, held) in self.held.items():
            p = self._policy_of(src)
            if p in self.job.multiagent.trained and p not in out:
                out[p] = held
        return list(out.values())

    def _best_path(self, msg: wire.Params) -> Path:
        return self._best_path_of(self._policy_of(msg.src))

    def _keep_best(self, what: tuple[Any, ...]) -> None:
        """best.pt as the base writes it; the first trained policy's best also plays
        as a reference ("best") from now on."""
        path, _, _, policy, _, meta = what
        first = self.job.multiagent.trained[0]
        if self.refs and path == self._best_path_of(first):
            spec = self.players[first].spec
            assert spec is not None
            seed = self.job.experiment.seed
            actor = make_actor(self.job.policy_view(first), spec, (0, 1), (seed, seed))
            actor.load_policy_arrays({k: np.asarray(v) for k, v in policy.items()})
            self.best_player = Player(actor, spec)
            self.best_rating = float(meta["eval_return_mean"])
        super()._keep_best(what)

    def _best_path_of(self, policy: str) -> Path:
        folder = self.job.multiagent.checkpoint_folder(policy)
        return Path(self.ctx.run_dir) / "checkpoints" / folder / "best.pt"


ROLE = MultiAgentEvaluator
