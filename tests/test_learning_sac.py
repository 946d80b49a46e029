"""SAC learns Pendulum-v1: one seed of the job file reaches an evaluation return of
-200 within its 20,000 env-step budget (the three-seed table is tools/bench/seeds.py)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import CONFIGS, kill_tree, start_job

pytestmark = pytest.mark.e2e  # real processes

TARGET = -200.0


@pytest.mark.timeout(600)
def test_sac_reaches_minus_200_on_pendulum_within_20000_steps(tmp_path):
    run = tmp_path / "run"
    proc = start_job(CONFIGS / "pendulum_sac.toml", run, "experiment.seed=0",
                     f"evaluation.stop_at_return={TARGET}")
    try:
        _, err = proc.communicate(timeout=580)
    finally:
        kill_tree(proc)
    assert proc.returncode == 0, err[-2000:]
    summary = json.loads((run / "summary.json").read_text())
    reached = [e for e in summary["evaluations"] if e["return_mean"] >= TARGET]
    assert reached and reached[0]["env_steps"] <= 20_000, summary["evaluations"]
