"""The launcher's TensorBoard charts: made once the job runs, nothing lost before."""

from __future__ import annotations

import time

import pytest


class _Log:
    def __init__(self):
        self.warnings: list[str] = []

    def warning(self, event: str, **kw) -> None:
        self.warnings.append(event)


def test_charts_are_made_once_the_job_runs_with_the_events_before(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from verl_zmq.ops.runview import RunView
    from verl_zmq.ops.scalars import ScalarStream
    from verl_zmq.ops.tb import Charts

    (tmp_path / "logs").mkdir()
    view = RunView(tmp_path)
    view.poll()
    log = _Log()
    charts, stream = Charts(tmp_path, 'name = "x"', log), ScalarStream(view)

    def write(events, final=False):
        charts.write(events, stream.take(events), final=final)

    before = {"event": "evaluated", "role": "evaluator", "eval/return_mean": 9.0,
              "eval/return_std": 1.0, "env_steps": 0, "ts": time.time()}
    write([before])
    assert not (tmp_path / "tb").exists()  # the writer's import waits for the job to run
    write([{"event": "sampling_started", "role": "sampler", "ts": time.time()}])
    assert (tmp_path / "tb").exists()
    later = dict(before, **{"eval/return_mean": 20.0, "env_steps": 500})
    write([later], final=True)
    ea = EventAccumulator(str(tmp_path / "tb"))
    ea.Reload()
    assert [(s.step, s.value) for s in ea.Scalars("eval/return_mean")] == [(0, 9.0), (500, 20.0)]
    assert not log.warnings
