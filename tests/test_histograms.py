"""TensorBoard histograms (`logging.histograms_interval`): what a learner sends
and what the launcher's writer makes of it, read back with TensorBoard's own
reader."""

from __future__ import annotations

import json

import numpy as np
import torch

from tests.conftest import CONFIGS, verl
from verl_zmq.learning.histograms import histogram, snapshot


def test_a_histogram_counts_the_finite_values():
    h = histogram(np.array([0.0, 1.0, 1.0, 2.0, np.nan, np.inf]), bins=2)
    assert h is not None and h["num"] == 4 and h["counts"] == [1, 3]
    assert h["min"] == 0.0 and h["max"] == 2.0 and h["sum_squares"] == 6.0
    assert histogram(np.array([np.nan])) is None


def test_a_snapshot_holds_actions_advantages_weights_and_norms():
    net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    batch = {"action": np.array([[0, 1], [1, 1]]), "valid": np.array([[True, False],
                                                                        [True, True]])}
    s = snapshot(batch, {"advantages": torch.tensor([0.5, -0.5, 1.0])}, net)
    assert s["hist"]["actions"]["num"] == 3  # the invalid step is left out
    assert s["hist"]["advantages"]["num"] == 3
    assert s["hist"]["weights"]["num"] == sum(p.numel() for p in net.parameters())
    assert set(s["norms"]) == {"0.weight", "0.bias", "2.weight", "2.bias"}
    assert s["norms"]["0.weight"] == float(net[0].weight.norm())


def test_the_writer_charts_them_for_tensorboard(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from verl_zmq.ops.tb import TBWriter

    net = torch.nn.Linear(2, 2)
    ev = {"event": "histograms", "id": "learner-0", "env_steps": 512, "ts": 1.0,
          **snapshot({"action": np.arange(10)}, {}, net)}
    w = TBWriter(tmp_path)
    w.histograms(json.loads(json.dumps(ev)))  # as it comes from the log
    w.histograms({"event": "histograms", "id": "x", "hist": {"bad": {"min": 0}}})  # ignored
    w.close()
    ea = EventAccumulator(str(tmp_path / "tb"), size_guidance={"histograms": 0})
    ea.Reload()
    assert set(ea.Tags()["histograms"]) == {"actions/learner-0", "weights/learner-0"}
    h = ea.Histograms("actions/learner-0")[0]
    assert h.step == 512 and h.histogram_value.num == 10
    assert "weights/learner-0/weight" in ea.Tags()["scalars"]


def test_a_learner_sends_them_every_n_updates(tmp_path):
    r = verl("run", str(CONFIGS / "cartpole_ppo.toml"), "--run-dir", str(tmp_path / "run"),
             "--set", "training.total_timesteps=2048", "--set", "logging.histograms_interval=2",
             "--set", "evaluation.interval_steps=100000")
    assert r.returncode == 0, r.stderr[-2000:]
    hist = [json.loads(x) for x in r.stdout.splitlines() if '"histograms"' in x]
    assert hist and all(e["version"] % 2 == 0 for e in hist)
    assert set(hist[0]["hist"]) == {"actions", "advantages", "weights"}
    assert hist[0]["norms"]
