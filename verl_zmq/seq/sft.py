"""Supervised warm start (`verl sft`): the job's policy trained on demonstration
responses by cross-entropy (teacher forcing), evaluated greedily on held-out
prompts, written as a policy checkpoint that `algorithm.init_from` loads as the
initial and the reference policy."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from ..config import Job, dumps_job
from ..envs.make import env_spec
from .model import token_obs
from .tasks import FIRST_ACTION_TOKEN, held_out, make_task


@dataclasses.dataclass
class SFTResult:
    """What a warm start did: steps taken, accuracy reached, where it was written."""

    steps: int
    accuracy: float
    seconds: float
    path: str


def demonstration_steps(job: Job, rng: np.random.Generator, prompts: int
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(observations, actions, response ids) of `prompts` demonstrations drawn from the
    training split, one row per response token (teacher forcing)."""
    env = job.environment
    from . import IDS

    task = make_task(env.kwargs.get("task", IDS.get(env.id, "")))
    L = task.max_prompt + task.max_response
    bufs, acts, seqs = [], [], []
    n = 0
    while n < prompts:
        prompt, meta = task.draw(rng)
        if held_out(prompt):
            continue
        demo = task.demonstration(meta)
        if demo is None:
            raise ValueError(f"environment: task {task.name!r} has no demonstrations to "
                             f"warm-start from")
        for i, token in enumerate(demo):
            bufs.append(prompt + demo[:i])
            acts.append(token - FIRST_ACTION_TOKEN)
            seqs.append(n)
        n += 1
    return token_obs(bufs, L), np.array(acts, np.int64), np.array(seqs, np.int64)


def run_sft(job: Job, steps: int, out: str, batch_prompts: int = 64, lr: float = 1e-3,
            stop_at_accuracy: float | None = None, eval_every: int = 50,
            report: Callable[[dict], None] | None = None) -> SFTResult:
    """Train the job's policy on demonstrations for `steps` steps (or until greedy
    exact-match accuracy on held-out prompts reaches `stop_at_accuracy`), then
    write it to `out` as a policy checkpoint."""
    from ..algos import make_algorithm
    from ..checkpoint import policy_state, save_atomic
    from ..policy.evaluate import evaluate

    torch.manual_seed(job.experiment.seed)
    spec = env_spec(job.environment)
    algo = make_algorithm(job, spec)
    net = algo.policy_module()
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    rng = np.random.default_rng(job.experiment.seed)
    E = job.evaluation
    t0 = time.monotonic()
    acc, step = 0.0, 0
    for step in range(1, steps + 1):
        obs, act, seq = demonstration_steps(job, rng, batch_prompts)
        d = net.dist(torch.as_tensor(obs), torch.as_tensor(seq))
        loss = -d.log_prob(torch.as_tensor(act)).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % eval_every == 0 or step == steps:
            acc = float(evaluate(algo, job, None, E.n_eval_episodes, E.seed).mean())
            if report is not None:
                report({"step": step, "loss": round(float(loss.detach()), 4), "accuracy": acc,
                        "seconds": round(time.monotonic() - t0, 1)})
            if stop_at_accuracy is not None and acc >= stop_at_accuracy:
                break
    state = policy_state(dumps_job(job), job.algorithm.name, algo.policy_arrays(),
                         sft_steps=step, eval_return_mean=acc)
    save_atomic(state, Path(out))
    return SFTResult(step, acc, time.monotonic() - t0, out)
