"""Reward-model server: scores the samplers' responses with the job's learned reward
model (`seq/reward_model.py`), on any host, restarted like any role.

A ROUTER takes `ScoreRequest`s from every sampler of the job. The server takes
one, then every other already waiting (up to `MAX_REQUESTS`), scores their responses
all in one batch in a worker thread, and answers each caller with its own
scores. A request it cannot read is answered with the error; a caller that
hears nothing by its deadline (the server died holding its request) scores
those responses as `on_error` says, and goes on.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np
import zmq

from .. import wire
from ..config.roles import REWARDMODEL
from ..seq.prompts import prompt_settings
from ..seq.reward_model import Chat, RewardModel, decode_items
from .base import Rates, Role, recv, send

MAX_REQUESTS = 64  # requests scored in one batch (those past it wait for the next)


class RewardModelRole(Role):
    """One reward-model server of the job."""

    name = REWARDMODEL

    @classmethod
    def preload(cls) -> None:
        import transformers  # noqa: F401 - what a warm spare would import

    async def setup(self) -> None:
        import torch

        torch.set_num_threads(self.job.resources.rewardmodel.cpu or 1)
        path = prompt_settings(self.job.environment.kwargs).reward_model_path
        device = "cuda" if self.job.resources.rewardmodel.gpu else "cpu"
        self.rm = await asyncio.to_thread(RewardModel, path, device)
        self.router, ep = self.ctx.transport.bind(zmq.ROUTER, "scores", hwm=1000)
        self.router.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.endpoints = {"scores": ep}
        self.scored = self.batches = self.refused = self.undelivered = 0
        self.busy_s = 0.0
        self.rates = Rates(scored=0, busy_s=0.0)
        self.log.info("reward_model_loaded", path=path, device=device)

    async def run(self) -> None:
        while True:
            waiting = [await recv(self.router, self.wire_stats, n_prefix=1,
                                  expect=(wire.ScoreRequest,))]
            while await self.router.poll(0) and len(waiting) < MAX_REQUESTS:
                waiting.append(await recv(self.router, self.wire_stats, n_prefix=1,
                                          expect=(wire.ScoreRequest,)))
            await self._answer([(p[0], m) for p, m in waiting if m is not None])

    async def _answer(self, requests: list[tuple[zmq.Frame, wire.ScoreRequest]]) -> None:
        """Score every readable request's items in one batch; answer each caller."""
        items: list[tuple[Chat, str]] = []
        spans: list[tuple[zmq.Frame, wire.ScoreRequest, int, int, str]] = []
        for ident, req in requests:
            try:
                got = decode_items(np.asarray(req.arrays.get("items", np.zeros(0, np.uint8)),
                                              np.uint8))
            except ValueError as e:
                self.refused += 1
                spans.append((ident, req, 0, 0, f"the items: {e}"))
                continue
            spans.append((ident, req, len(items), len(items) + len(got), ""))
            items += got
        t0 = time.monotonic()
        scores = await asyncio.to_thread(self.rm.score, items) if items else np.zeros(0)
        self.busy_s += time.monotonic() - t0
        self.scored += len(items)
        self.batches += bool(items)
        if self.batches == 1 and items:  # the model answers: said once
            self.log.info("first_batch_scored", responses=len(items),
                          score_mean=round(float(scores.mean()), 4))
        for ident, req, lo, hi, error in spans:
            reply = wire.ScoreReply(id=req.id, error=error, arrays={} if error else {
                "score": scores[lo:hi].astype(np.float32)})
            try:
                await send(self.router, reply, self.id, prefix=[ident])
            except zmq.ZMQError:  # the caller is gone (restarted): nobody to tell
                self.undelivered += 1

    def metrics(self) -> dict[str, float]:
        d, dt = self.rates.update(scored=self.scored, busy_s=self.busy_s)
        return {"rewardmodel/scored": float(self.scored),
                "rewardmodel/batches": float(self.batches),
                "rewardmodel/refused": float(self.refused),
                "rewardmodel/undelivered": float(self.undelivered),
                "rewardmodel/scored_per_s": d["scored"] / dt,
                "rewardmodel/busy_frac": d["busy_s"] / dt}


ROLE = RewardModelRole
