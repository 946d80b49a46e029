"""Callbacks: code of the user's own, run in the launcher's process while a job
trains (`verl_zmq.train(job, callbacks=[...])`), as Stable-Baselines3's
`EvalCallback` hooks and stop rules.

    class Report(verl_zmq.Callback):
        def on_evaluation(self, run, event):
            print(run.env_steps, event["eval/return_mean"])

    verl_zmq.train("job.toml", callbacks=[Report(), verl_zmq.StopOnNoImprovement(5)])

A hook that returns False, or calls `run.stop(reason)`, ends the job cleanly (its
roles stop as at a Ctrl-C, checkpoints written): the run's status is "done" and
its summary says `stopped_by`. A hook that raises stops the job the same way,
and `train` raises that exception once the job has stopped.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class RunState:
    """What a callback sees of the running job, as of the event it is called for."""

    run_dir: Path
    env_steps: int
    evaluations: list[tuple[int, float]]  # (env steps, mean return), oldest first
    best_return: float | None
    stop_job: Callable[[str], None] = field(repr=False)

    def stop(self, reason: str = "a callback") -> None:
        """End the job cleanly, as soon as the launcher can (within a second)."""
        self.stop_job(reason)


class Callback:
    """Hooks a job calls in the launcher's process; override the ones you need.
    Each may return False to end the job (None or True: go on)."""

    def on_evaluation(self, run: RunState, event: dict[str, Any]) -> bool | None:
        """After each evaluation; `event` holds `eval/return_mean`, `eval/return_std`,
        `env_steps`, `version`, the `logging.info_keys` means (`eval/is_success`)."""
        return None

    def on_metrics(self, run: RunState, metrics: dict[str, Any]) -> bool | None:
        """At each metrics line of a learner or peer (every `logging.interval_s`):
        its losses, rates and counters by name (`losses/policy_loss`,
        `learner/env_steps`, ...)."""
        return None


class StopOnReturn(Callback):
    """End the job once an evaluation's mean return reaches `threshold`
    (Stable-Baselines3's StopTrainingOnRewardThreshold; `evaluation.stop_at_return`
    does the same inside the job)."""

    def __init__(self, threshold: float):
        self.threshold = threshold

    def on_evaluation(self, run: RunState, event: dict[str, Any]) -> bool | None:
        r = event.get("eval/return_mean")
        if isinstance(r, int | float) and r >= self.threshold:
            run.stop(f"StopOnReturn: {r:.4g} >= {self.threshold:.4g}")
        return None


class StopOnNoImprovement(Callback):
    """End the job after `patience` evaluations in a row that did not beat the best
    by more than `min_delta`, once `min_evaluations` have run
    (StopTrainingOnNoModelImprovement)."""

    def __init__(self, patience: int, min_delta: float = 0.0, min_evaluations: int = 0):
        self.patience, self.min_delta, self.min_evals = patience, min_delta, min_evaluations
        self.best, self.stale, self.seen = -math.inf, 0, 0

    def on_evaluation(self, run: RunState, event: dict[str, Any]) -> bool | None:
        r = event.get("eval/return_mean")
        if not isinstance(r, int | float):
            return None
        self.seen += 1
        if r > self.best + self.min_delta:
            self.best, self.stale = float(r), 0
        else:
            self.stale += 1
        if self.seen > self.min_evals and self.stale >= self.patience:
            run.stop(f"StopOnNoImprovement: no better evaluation in {self.stale}")
        return None
