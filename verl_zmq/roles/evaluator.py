"""Evaluator: subscribes to params and, every `evaluation.interval_steps` env
steps, runs `n_eval_episodes` deterministic episodes on its own separately
seeded envs. Logs `eval/return_mean` and `eval/return_std`, writes `best.pt`
from the params it just evaluated when they beat the best so far (confirmed by a
second, larger evaluation on other episode seeds: `evaluation.confirm_best`), and stops
the job when `stop_at_return` is reached or after evaluating the final params.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import zmq

from .. import wire
from ..config import Evaluation, dumps_job
from ..config.algorithms import numpy_acting
from ..config.roles import EVALUATOR
from ..config.wiring import EVALUATOR_PARAMS
from ..envs.infos import means
from ..envs.make import env_spec
from ..learning.gossip.core import fingerprint
from ..normalize import obs_norm
from ..policy.evaluate import evaluate, video_available
from ..policy.numpy_actor import make_actor
from .base import Role, reconnect, recv
from .best_writer import BestWriter

CONFIRM_SEEDS = 500_009  # a best-model candidate's second evaluation: episode seeds apart
HISTORY = 16  # returns of recent params, and versions of each peer, by fingerprint
PROGRESS_S = 1.0  # an evaluation's progress is logged at most this often


def _put(d: dict[Any, Any], key: Any, value: Any, cap: int) -> None:
    """Remember `value` under `key`, forgetting the oldest beyond `cap` entries."""
    d[key] = value
    while len(d) > cap:
        d.pop(next(iter(d)))


class EvaluatorRole(Role):
    """Measures the deterministic return of published params."""

    name = EVALUATOR

    @classmethod
    def preload(cls) -> None:
        from .learner import LearnerRole

        LearnerRole.preload()  # it builds the job's algorithm to act with

    async def _acting(self) -> None:
        """The policy copy it evaluates with (`algo`), its spaces and obs statistics."""
        self.spec = env_spec(self.job.environment)
        # acting in numpy where samplers do: no torch import (seconds of a core) at
        # the job's start beside the learner's; torch is only needed to write best.pt
        # (the launcher forks the evaluator from its torch zygote, torch imported)
        seed = self.job.experiment.seed
        self.algo = make_actor(self.job, self.spec, (0, 1), (seed, seed),
                               threads=self.job.resources.evaluator.cpu or 1)
        self.log.info("evaluator_acting", inference="numpy" if numpy_acting(self.job)
                      else "torch")
        self.rms = obs_norm(self.spec) if self.job.environment.normalize_obs \
            else None

    async def setup(self) -> None:
        await self._acting()
        self.sub = self.ctx.transport.connect_edge(  # deterministic: every version (_latest)
            EVALUATOR_PARAMS, hwm=0 if self.job.experiment.deterministic else None)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.learners: dict[str, str] = {}
        # per trainer (a learner, or each DAPO peer): when next, reached, finished
        self.next_at: dict[str, int] = {}
        self.reached: set[str] = set()
        self.finals: set[str] = set()
        self.trainers: set[str] = set()
        self.best = await asyncio.to_thread(self._best_so_far)  # torch, on a resume
        self.last: dict[str, float] = {}
        self.evaluations = 0
        # params fingerprint -> (returns, info values) of its evaluation (newest first)
        self.results: dict[str, tuple[np.ndarray, dict[str, list[float]]]] = {}
        self.infos: dict[str, list[float]] = {}  # the last evaluation's logging.info_keys
        self.checked: dict[str, float] = {}  # params fingerprint -> confirmed best return
        self.held: dict[str, tuple[str, wire.Params]] = {}  # trainer -> (fingerprint, params)
        self.credited: dict[str, int] = {}  # trainer -> the version last charted
        self.history: dict[str, dict[str, int]] = {}  # DAPO peer -> recent prints: version
        self.best_writer = BestWriter(self.log)
        self.video_dir = ""
        if self.job.environment.record_video:
            if video_available():
                self.video_dir = str(Path(self.ctx.run_dir) / self.job.environment.record_video)
            else:
                self.log.warning("video_unavailable", reason="moviepy is not installed; "
                                 "pip install moviepy to record evaluation videos")

    def _best_so_far(self) -> float:
        """A resumed run keeps its best: best.pt is only replaced by a better one."""
        path = Path(self.ctx.run_dir) / "checkpoints" / "best.pt"
        if not path.exists():
            return -math.inf
        from ..checkpoint import load

        try:
            return float(load(path)["eval_return_mean"])
        except (OSError, KeyError, RuntimeError, ValueError, TypeError):
            return -math.inf

    def on_membership(self, members: dict[str, wire.Member]) -> None:
        super().on_membership(members)
        # a trainer of our group (rank 0 of data-parallel learners: the others
        # publish nothing); in a decentralised job every peer, whatever its group
        wanted = EVALUATOR_PARAMS.targets(members.values(), self.ctx.group,
                                          self.job.traits.decentralised)
        reconnect(self.sub, self.learners, wanted, self.log, "learner")
        self.trainers = set(wanted)

    async def _latest(self) -> list[tuple[str, wire.Params]]:
        """Block for params, then drain the queue: the newest of each sender, which
        `held` keeps with its fingerprint (deterministic evaluation: the same params
        give the same returns); DAPO peers' recent prints go to `history`."""
        _, msg = await recv(self.sub, self.wire_stats, expect=(wire.Params,))
        newest: dict[str, tuple[str, wire.Params]] = {}
        E = self.job.evaluation
        track = self.job.traits.decentralised and E.deterministic
        # experiment.deterministic: every version in order, so that the one evaluated
        # is the first past each interval in every run (not the newest when it came)
        ordered, every = self.job.experiment.deterministic, list[tuple[str, wire.Params]]()
        while True:
            if msg is not None:
                fp = fingerprint(dict(msg.arrays)) if E.deterministic else ""
                if track:  # every version a peer held, by fingerprint
                    _put(self.history.setdefault(msg.src, {}), fp, msg.version, HISTORY)
                cur = newest.get(msg.src)
                if cur is None or msg.version >= cur[1].version or msg.final:
                    newest[msg.src] = (fp, msg)
                every.append((fp, msg))
            if not await self.sub.poll(0):
                self.held.update(newest)
                return every if ordered else list(newest.values())
            _, msg = await recv(self.sub, self.wire_stats, expect=(wire.Params,))

    def _all(self, done: set[str]) -> bool:
        """Every trainer still in the job is in `done` (a dead peer cannot block the end)."""
        live = self.trainers or done
        return bool(done) and live <= done

    def _all_reached(self) -> bool:
        """Every trainer of the job reached the target: for DAPO every one of its
        `launch.peers` peers, so a peer lost for a while (or joining late) must
        reach it too; without it the job ends when the others finish training."""
        if self.job.traits.decentralised:
            everyone = {f"peer-{i}" for i in range(max(1, self.job.launch.peers))}
            return (everyone | self.trainers) <= self.reached
        return self._all(self.reached)

    async def run(self) -> None:
        E = self.job.evaluation
        while True:
            for fp, msg in await self._latest():
                self.held[msg.src] = (fp, msg)  # deterministic: this one's, not the newest's
                if await self._evaluate(msg, E):
                    return

    async def _evaluate(self, msg: wire.Params, E: Evaluation) -> bool:
        """Evaluate one sender's params when due; True when the job should end. With
        DAPO every live peer is covered in the same round, once: the newest
        parameters that every peer holds or held (gradient rounds keep the peers
        identical; one may be an update ahead) are evaluated once and credited to
        all; peers with parameters of their own are each evaluated on their newest."""
        src = msg.src
        # not its starting params; nor when deterministic, as whether they reach us
        # before the first update is a race
        if src not in self.next_at and (self.job.experiment.deterministic or (
                not E.before_training and msg.env_steps == 0)):
            self.next_at[src] = E.interval_steps
        if msg.env_steps < self.next_at.get(src, 0) and not msg.final:
            return False
        if msg.final and src in self.finals:
            return False
        live = self._live(msg)
        # (history is kept for DAPO peers only: a learner's params are never "common")
        common = [m for m in live if self._fp(m.src) and all(
            self._fp(m.src) in self.history.get(o.src, {}) for o in live)]
        if common:  # one evaluation, every peer's
            one = max(common, key=lambda m: m.version)
            rets = await self._returns(one, E)
            fp = self._fp(one.src)
            for m in live if rets is not None else []:
                assert rets is not None
                if self.credited.get(m.src) == m.version and m.src != src:
                    continue  # this very version is charted already
                # m may be an update past these params: say when it held them
                held = self.history.get(m.src, {}).get(fp, m.version)
                if await self._credit(m, rets, fp, E, held):
                    return True
        else:
            for m in live:
                rets = await self._returns(m, E)
                if rets is not None and await self._credit(m, rets, self._fp(m.src), E):
                    return True
        if msg.final:
            self.finals.add(src)
            if self._all(self.finals | self.reached):
                await self.job_shutdown("training_finished")
                return True
        return False

    def _fp(self, src: str) -> str:
        return self.held.get(src, ("", None))[0]

    def _live(self, msg: wire.Params) -> list[wire.Params]:
        """The params an evaluation round covers: the sender's, and in DAPO every
        live peer's newest as well."""
        if not self.job.traits.decentralised:
            return [msg]
        return [msg, *(m for s, (_, m) in self.held.items()
                       if s != msg.src and s in self.trainers)]

    async def _returns(self, msg: wire.Params, E: Evaluation) -> np.ndarray | None:
        """The episodes' returns of these params: run, or known from the same params
        (same seeds, same returns); None when they do not fit."""
        fp = self._fp(msg.src)
        known = self.results.get(fp) if fp else None
        if known is not None:
            rets, self.infos = known
            return rets
        if not self._load(msg):
            return None
        self.infos = {}
        rets = await asyncio.to_thread(self._play, E.n_eval_episodes, E.seed, self.video_dir,
                                       f"eval-{msg.env_steps}", self.infos,
                                       self._progress("evaluation", msg))
        if fp:
            _put(self.results, fp, (rets, self.infos), HISTORY)
        return rets

    def _progress(self, what: str, msg: wire.Params) -> Callable[[int, int], None]:
        """A callback for `evaluate` (run in a thread): an `eval_progress` event as
        episodes end, at most every PROGRESS_S, so the launcher can say what the
        job waits for once training has ended (a final evaluation)."""
        loop = asyncio.get_running_loop()
        last = [0.0]

        def report(done: int, total: int) -> None:
            now = time.monotonic()
            if done < total and now - last[0] < PROGRESS_S:
                return
            last[0] = now
            loop.call_soon_threadsafe(lambda: self.log.info(
                "eval_progress", what=what, done=done, total=total, final=msg.final,
                env_steps=msg.env_steps, member=msg.src))

        return report

    def _play(self, episodes: int, seed: int, video_dir: str, prefix: str,
              infos: dict[str, list[float]] | None,
              progress: Callable[[int, int], None] | None) -> np.ndarray:
        """Run `episodes` episodes (seeded from `seed`) with the params loaded; their
        returns. Called in a worker thread."""
        return evaluate(self.algo, self.job, self.rms, episodes, seed,
                        self.job.evaluation.deterministic, video_dir, prefix, infos, progress)

    def _score(self, rets: np.ndarray) -> float:
        """What an evaluation is ranked by (best.pt, the stop target): the mean return."""
        return float(rets.mean())

    def _best_path(self, msg: wire.Params) -> Path:
        return Path(self.ctx.run_dir) / "checkpoints" / "best.pt"

    def _extra(self) -> dict[str, float]:
        """Metrics of an evaluation beside the returns' (a multi-agent one's)."""
        return {}

    def _load(self, msg: wire.Params) -> bool:
        """Load these params (and observation statistics) to act; False, counted,
        when they do not fit."""
        try:
            self.algo.load_policy_arrays(dict(msg.arrays))
        except ValueError as e:
            self.wire_stats.reject(msg.src, wire.WireError(f"params do not fit: {e}"))
            return False
        if self.rms is not None:
            self.rms.load_arrays(dict(msg.arrays))
        return True

    async def _confirmed(self, msg: wire.Params, mean: float, fp: str, episodes: int
                         ) -> tuple[float, int]:
        """The return a best-model candidate is kept on: with `confirm_best`, the mean
        of a second evaluation on episode seeds of its own (`confirm_episodes`), alone:
        the first was chosen for beating the best, so it reads high (the winner's
        curse; on Acrobot PPO a best.pt kept on the mean of both scored 1.7 below the
        final policy on 100 fresh episodes, over 9 runs). Once per params: DAPO peers
        holding the same ones share it. (return, episodes it is the mean of)"""
        E = self.job.evaluation
        if fp and fp in self.checked:
            return self.checked[fp], self.job.evaluation.confirm_count
        if not E.confirm_best or not self._load(msg):
            return mean, episodes
        again = await asyncio.to_thread(self._play, self.job.evaluation.confirm_count,
                                        E.seed + CONFIRM_SEEDS, "", "eval", None,
                                        self._progress("confirmation", msg))
        score = self._score(again)
        self.log.info("best_checked", env_steps=msg.env_steps, version=msg.version,
                      member=msg.src, first=mean, second=score, episodes=len(again),
                      kept=score > self.best, previous_best=self.best)
        if fp:
            _put(self.checked, fp, score, HISTORY)
        return score, len(again)

    async def _credit(self, msg: wire.Params, rets: np.ndarray, fp: str, E: Evaluation,
                      held: int | None = None) -> bool:
        """Log one trainer's evaluation (of the params it held at version `held`, its
        newest when None); True when every trainer has reached the target."""
        self.credited[msg.src] = msg.version
        self.next_at[msg.src] = (msg.env_steps // E.interval_steps + 1) * E.interval_steps
        reached = E.stop_at_return is not None and self._score(rets) >= E.stop_at_return
        if reached:
            self.reached.add(msg.src)
        ends = reached and self._all_reached()
        # the evaluation that ends the job keeps its params as best without a second
        # one: the job stops on them (they are the final policy), and the second
        # evaluation would hold the stop for seconds
        await self._report(msg, rets, fp, msg.version if held is None else held,
                           confirm=not ends)
        if not reached:
            return False
        self.log.info("target_reached", **{"eval/return_mean": self._score(rets)},
                      target=E.stop_at_return, env_steps=msg.env_steps, member=msg.src,
                      reached=len(self.reached), trainers=len(self.trainers))
        if ends:
            await self.job_shutdown("target_reached")
            return True
        return False

    async def _report(self, msg: wire.Params, rets: np.ndarray, fp: str, held: int,
                      confirm: bool = True) -> None:
        self.evaluations += 1
        mean, std = float(rets.mean()), float(rets.std())
        self.last = {"eval/return_mean": mean, "eval/return_std": std,
                     "eval/return_min": float(rets.min()), "eval/return_max": float(rets.max()),
                     **means(self.infos, "eval/"),  # logging.info_keys (is_success)
                     # prompt jobs: verl's val-core/<data_source>/acc/mean@N beside
                     **getattr(self.algo, "val_metrics", {}), **self._extra()}
        mean = self._score(rets)
        best = mean > self.best
        self.log.info("evaluated", env_steps=msg.env_steps, version=msg.version,
                      params_version=held,
                      episodes=len(rets), final=msg.final, best=best, member=msg.src,
                      params=fp[:16], score=mean, **self.last)
        # a second evaluation only where a best was beaten: the first has nothing to
        # beat, so it was not chosen for reading high
        episodes = len(rets)
        if best and confirm and self.best > -math.inf:
            mean, episodes = await self._confirmed(msg, mean, fp, episodes)
        if best and mean > self.best:
            self.best = mean
            # what best.pt holds: the one best figure the launcher reports
            self.log.info("best_kept", env_steps=msg.env_steps, version=msg.version,
                          member=msg.src, return_mean=mean, episodes=episodes)
            rms = self.rms.to_arrays() if self.rms is not None else None
            for m in self._best_params(msg):
                # views of the received frames: policy_state copies them, in the thread
                policy = {k: v for k, v in m.arrays.items() if not k.startswith("obs_rms/")}
                meta = dict(env_steps=m.env_steps, version=m.version, eval_return_mean=mean)
                self._keep_best((self._best_path(m), dumps_job(self.job),
                                 self.job.algorithm.name, policy, rms, meta))

    def _best_params(self, msg: wire.Params) -> list[wire.Params]:
        """The params a new best keeps (each to its `_best_path`): the evaluated ones."""
        return [msg]

    def _keep_best(self, what: tuple[Any, ...]) -> None:
        """Write best.pt behind the evaluations (roles/best_writer.py)."""
        self.best_writer.keep(what)

    async def teardown(self) -> None:
        await self.best_writer.done()  # the job's best is on disk before we exit

    def status(self) -> dict[str, float]:
        """The newest params version held (a trainer's versions, not gossip peers'
        own numbers): the registry's floor for a trainer that takes over."""
        if self.job.traits.decentralised or not self.held:
            return {}
        return {"version": max(m.version for _, m in self.held.values())}

    def metrics(self) -> dict[str, float]:
        out: dict[str, float] = {"evaluator/evaluations": self.evaluations}
        if self.evaluations:
            out["evaluator/best_return"] = self.best
        out.update(self.last)
        return out


ROLE = EvaluatorRole
