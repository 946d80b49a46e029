"""What a trainer hands out to travel while an update runs in its thread: the
arrays of the version before it, never the weights half-way through it (a
gossip peer answers pulls from its event loop meanwhile)."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import structlog
import torch

from tests.conftest import CONFIGS
from verl_zmq.algos.base import Learned
from verl_zmq.config import load_job
from verl_zmq.envs.make import env_spec
from verl_zmq.learning.trainer import Trainer


def test_arrays_asked_for_during_an_update_are_those_before_it(tmp_path):
    job = load_job(CONFIGS / "cartpole_ppo.toml", [])
    t = Trainer(job, env_spec(job.environment), tmp_path, structlog.get_logger())
    t.read_during_updates = True  # as a gossip peer sets it
    before = t.arrays()
    changed, release = threading.Event(), threading.Event()

    def learn(batch, at):  # changes the weights in place, then holds the update open
        with torch.no_grad():
            for p in t.algo.policy_module().parameters():
                p.add_(1.0)
        changed.set()
        release.wait(30)
        return Learned({})

    t.algo.learn = learn

    async def main() -> None:
        update = asyncio.create_task(t.update({}))
        await asyncio.to_thread(changed.wait, 30)
        during = t.arrays()
        assert all(np.array_equal(during[k], before[k]) for k in before)
        release.set()
        await update
        after = t.arrays()
        assert all(np.array_equal(after[k], before[k] + 1.0) for k in before)

    asyncio.run(main())
    assert t.state.version == 1


def test_a_learner_takes_no_copy_before_its_updates(tmp_path):
    """Nothing reads a learner's arrays during its updates (it publishes between them):
    no copy of the policy is added to each update."""
    job = load_job(CONFIGS / "cartpole_ppo.toml", [])
    t = Trainer(job, env_spec(job.environment), tmp_path, structlog.get_logger())
    copies = []
    policy_arrays = t.algo.policy_arrays
    t.algo.policy_arrays = lambda: copies.append(1) or policy_arrays()
    t.algo.learn = lambda batch, at: Learned({})
    for _ in range(3):
        asyncio.run(t.update({}))
    assert copies == [] and t.state.version == 3
