"""A sampler's way to the job's reward-model servers (`roles/rewardmodel.py`): the
collector's `seq.reward_model.model_scores` asks through a `Requester`
(`ScoreRequest` out, `ScoreReply` back). A reply that does not come within three
times `reward_timeout_s` (the server died holding the request), says an error,
or holds other than one finite score a response, is no score: the collector
counts the responses as reward errors and scores them as `on_error` says.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from .. import wire
from ..config.wiring import SCORES
from ..seq.reward_model import Chat, encode_items, route_scores
from .requester import Requester

if TYPE_CHECKING:
    from .base import Role


def attach(role: Role) -> None:
    """A client to the job's reward-model servers, run beside the role, the process's
    `model_scores` answered through it. Before the role builds its collector."""
    from ..seq.prompts import prompt_settings

    deadline = 3 * prompt_settings(role.job.environment.kwargs).reward_timeout_s
    requests = Requester(role, SCORES, role.ctx.transport.connect_edge(SCORES), wire.ScoreReply,
                         deadline, "reward_model")

    def ask(items: Sequence[tuple[Chat, str]]) -> np.ndarray | None:
        got = requests.ask(wire.ScoreRequest(arrays={"items": encode_items(items)}))
        if got is None:
            return None
        scores = np.asarray(got.arrays.get("score", np.zeros(0)), np.float32)
        if got.error or scores.shape != (len(items),) or not np.isfinite(scores).all():
            role.log.warning("reward_model_refused", error=got.error or
                             f"{scores.shape} scores for {len(items)} responses")
            return None
        return scores

    route_scores(ask)
    role.helpers.append(requests)
