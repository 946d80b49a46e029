"""The GPU-ready update path, on the CPU this suite runs on: device selection,
bfloat16 autocast (`training.amp`), and checkpoints mapped to the device that
loads them. A GPU run is tools/gpu_smoke.sh."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.conftest import CONFIGS
from tests.test_grad_mix import ppo_batch
from tests.test_learners import offpolicy_batch
from verl_zmq import checkpoint
from verl_zmq.algos import make_algorithm
from verl_zmq.config import ConfigError, load_job
from verl_zmq.envs.make import env_spec
from verl_zmq.learning.trainer import resolve_device


def test_device_selection(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == "cpu"
    assert resolve_device("cpu") == "cpu"
    with pytest.raises(ValueError, match="training.device = 'cuda:1': torch sees no GPU"):
        resolve_device("cuda:1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == "cuda"
    assert resolve_device("cuda:1") == "cuda:1"


def test_amp_is_checked_in_the_job_file():
    with pytest.raises(ConfigError, match="training.amp"):
        load_job(CONFIGS / "cartpole_ppo.toml", ['training.amp="fp8"'])


@pytest.mark.parametrize("conf", ["cartpole_ppo.toml", "cartpole_dqn.toml", "pendulum_sac.toml"])
def test_bf16_autocast_updates_and_keeps_float32_weights(conf):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    job = load_job(CONFIGS / conf, ['training.amp="bf16"'])
    spec = env_spec(job.environment)
    algo = make_algorithm(job, spec)
    algo.init_policy()
    rng = np.random.default_rng(0)
    x = torch.as_tensor(rng.standard_normal((4, *spec.obs_shape)), dtype=torch.float32)
    net = getattr(algo, "net", None) or getattr(algo, "q", None) or algo.actor
    first = next(m for m in net.modules() if isinstance(m, torch.nn.Linear))
    with algo.autocast():
        assert first(x).dtype == torch.bfloat16  # the forward pass runs in bfloat16
    before = [p.detach().clone() for p in net.parameters()]
    for _ in range(3):
        batch = ppo_batch(rng, 16, 8) if conf == "cartpole_ppo.toml" else \
            offpolicy_batch(rng, spec, 64)
        out = algo.learn(batch)
    assert all(np.isfinite(v) for v in out.metrics.values()), out.metrics
    assert all(p.dtype == torch.float32 for p in net.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, net.parameters()))
    if out.priorities is not None:
        assert out.priorities.dtype == np.float32 and np.isfinite(out.priorities).all()


def test_a_checkpoint_is_read_onto_the_cpu_and_copied_into_the_learners_device(tmp_path):
    """A learner reads a checkpoint onto the CPU (`map_location`), whatever device
    wrote it ("meta" stands in for another device here), and its modules and
    optimisers copy the state into their own device; the RNG state stays on the CPU."""
    torch.set_num_threads(1)
    job = load_job(CONFIGS / "cartpole_ppo.toml")
    spec = env_spec(job.environment)
    a, b = make_algorithm(job, spec), make_algorithm(job, spec)
    a.init_policy()
    a.learn(ppo_batch(np.random.default_rng(0), 16, 8))
    path = tmp_path / "latest.pt"
    checkpoint.save_atomic({"algo": a.state_dict(), "torch_rng": torch.get_rng_state()}, path)
    state = checkpoint.load(path)
    torch.set_rng_state(state["torch_rng"])
    b.load_state_dict(state["algo"])
    assert all(torch.equal(x, y) for x, y in zip(a.net.parameters(), b.net.parameters()))
    assert b.updates == a.updates == 1
    moved = checkpoint.load(path, device="meta")
    assert {t.device.type for t in moved["algo"]["net"].values()} == {"meta"}
