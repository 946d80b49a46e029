"""Off-policy end to end in one process: samplers -> prioritised shard (n-step
transitions, limiter) -> DQN learner -> priority updates back to the shard."""

from __future__ import annotations

import json

import pytest

from tests.conftest import CONFIGS, verl


@pytest.mark.timeout(300)
def test_dqn_pipeline_runs_and_updates_priorities(tmp_path):
    r = verl("run", str(CONFIGS / "cartpole_dqn.toml"), "--run-dir", str(tmp_path),
             "--set", "training.total_timesteps=6000", "--set", "evaluation.interval_steps=3000",
             "--set", "replay.min_size_to_sample=500", "--set", "logging.interval_s=0.5",
             timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    evs = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    replay = [e for e in evs if e.get("event") == "metrics" and e.get("role") == "replay"]
    assert replay and replay[-1]["replay/priority_updates"] > 0
    assert replay[-1]["replay/sampled"] > 0 and replay[-1]["replay/transitions"] > 0
    learner = [e for e in evs if e.get("event") == "training_finished"]
    assert learner and learner[0]["env_steps"] >= 6000 and learner[0]["updates"] > 0
    assert any(e.get("event") == "evaluated" for e in evs)
