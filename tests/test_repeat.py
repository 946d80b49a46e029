"""Runs that repeat (`experiment.deterministic`): what the mode refuses, the
samplers' lock-step, and two real runs of the main job with the same seed whose
checkpoints are equal bit for bit and whose evaluation curves are the same."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import CONFIGS, launch
from tools.repeat_check import curve, same_checkpoints
from verl_zmq.config import ConfigError, load_job
from verl_zmq.sampling.lockstep import LockStep

DET = "experiment.deterministic=true"


@pytest.mark.parametrize("job, sets, why", [
    ("cartpole_dqn.toml", (), "off-policy replay"),
    ("cartpole_dapo.toml", (), "DAPO's gossip"),
    ("cartpole_ppo.toml", ("training.num_learners=2",), "data-parallel learners"),
    ("cartpole_ppo.toml", ("training.sync_interval_updates=2",), "every version"),
    ("cartpole_ppo.toml", ("sampling.num_workers=3",), "cannot share equally"),
])
def test_what_the_mode_cannot_repeat_is_named_before_anything_starts(job, sets, why):
    with pytest.raises(ConfigError, match=f"experiment.deterministic: .*{why}"):
        load_job(CONFIGS / job, [DET, *sets])
    load_job(CONFIGS / "cartpole_ppo.toml", [DET])  # the main job is repeatable


def test_a_sampler_in_lockstep_needs_each_version_in_turn():
    lock = LockStep(load_job(CONFIGS / "cartpole_ppo.toml",
                             [DET, "sampling.num_workers=2"]))  # 4 fragments, 2 each
    assert lock.per_update == 2 and lock.needed == 0
    assert lock.ready(0) and lock.take(0) is None  # the policy it has is version 0
    lock.shipped = 2
    assert lock.needed == 1 and not lock.ready(0)
    lock.heard(2, {"w": np.zeros(1)})  # a later version waits for its turn
    lock.heard(1, {"w": np.ones(1)})
    assert lock.ready(0)
    version, arrays = lock.take(0) or (None, None)
    assert version == 1 and arrays["w"][0] == 1
    lock.shipped = 4
    assert lock.take(1)[0] == 2 and lock.arrived == {}


@pytest.mark.e2e
@pytest.mark.timeout(400)
def test_two_runs_with_the_same_seed_repeat_bit_for_bit(tmp_path, ports):
    sets = [DET, "training.total_timesteps=6000", "checkpoint.interval_steps=2048",
            "evaluation.interval_steps=2048", f"launch.port_range=[{ports[0]}, {ports[1]}]"]
    for run in ("a", "b"):
        r = launch("local", str(CONFIGS / "cartpole_ppo.toml"), "--run-dir", str(tmp_path / run),
                   *[x for s in sets for x in ("--set", s)], timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
    lines = same_checkpoints(tmp_path / "a", tmp_path / "b")
    assert len(lines) >= 4 and all("bit for bit equal" in ln for ln in lines), lines
    a, b = curve(tmp_path / "a"), curve(tmp_path / "b")
    assert len(a) >= 3 and a == b
