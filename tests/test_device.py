"""The update path on a device: device selection, bfloat16 autocast
(`training.amp`), batches moved through pinned memory, and checkpoints mapped to
the device that loads them. The tests that take `DEVICE` run on the GPU where
torch sees one (or on `VERL_TEST_DEVICE`), else on the CPU, so the same
assertions hold on both; tools/gpu_check.sh runs them on a GPU machine."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from tests.conftest import CONFIGS
from tests.test_grad_mix import ppo_batch
from tests.test_learners import offpolicy_batch
from verl_zmq import checkpoint
from verl_zmq.algos import make_algorithm
from verl_zmq.algos.base import resolve_device
from verl_zmq.config import ConfigError, load_job
from verl_zmq.envs.make import env_spec

DEVICE = os.environ.get("VERL_TEST_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu")


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
    algo = make_algorithm(job, spec, DEVICE)
    algo.init_policy()
    rng = np.random.default_rng(0)
    x = torch.as_tensor(rng.standard_normal((4, *spec.obs_shape)), dtype=torch.float32,
                        device=DEVICE)
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
    assert all(p.dtype == torch.float32 and p.device.type == torch.device(DEVICE).type
               for p in net.parameters())
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


def test_a_batch_reaches_the_device_whole():
    """`to_device` moves a batch column once per update (through pinned host memory
    and an asynchronous copy on a GPU): what arrives is what was sent."""
    job = load_job(CONFIGS / "cartpole_ppo.toml")
    algo = make_algorithm(job, env_spec(job.environment), DEVICE)
    rng = np.random.default_rng(0)
    cols = [rng.standard_normal((64, 512)).astype(np.float32), rng.integers(0, 9, (64, 512)),
            rng.random((64, 512)) < 0.5]
    moved = [algo.to_device(c) for c in cols]
    for c, m in zip(cols, moved, strict=True):
        assert m.device.type == torch.device(DEVICE).type
        assert np.array_equal(m.cpu().numpy(), c)


def test_a_checkpoint_written_on_the_device_loads_on_the_cpu(tmp_path):
    """Trained and saved on `DEVICE`, read with the learner's own loader
    (weights only) onto the CPU, loaded into a CPU learner: the same weights, and
    the CPU learner updates from there."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    job = load_job(CONFIGS / "cartpole_ppo.toml")
    spec = env_spec(job.environment)
    on_dev, on_cpu = make_algorithm(job, spec, DEVICE), make_algorithm(job, spec, "cpu")
    on_dev.init_policy()
    rng = np.random.default_rng(0)
    on_dev.learn(ppo_batch(rng, 16, 8))
    path = tmp_path / "latest.pt"
    checkpoint.save_atomic({"algo": on_dev.state_dict()}, path)
    state = checkpoint.load(path)
    assert {t.device.type for t in state["algo"]["net"].values()} == {"cpu"}
    on_cpu.load_state_dict(state["algo"])
    assert all(torch.equal(a.detach().cpu(), b) for a, b in
               zip(on_dev.net.parameters(), on_cpu.net.parameters()))
    out = on_cpu.learn(ppo_batch(rng, 16, 8))
    assert all(np.isfinite(v) for v in out.metrics.values())


def test_only_samplers_that_generate_take_a_device():
    with pytest.raises(ConfigError, match="sampling.device = 'cuda'.*Hugging Face"):
        load_job(CONFIGS / "cartpole_ppo.toml", ['sampling.device="cuda"'])
    assert load_job(CONFIGS / "reverse_hf_grpo.toml",
                    ['sampling.device="auto"']).sampling.device == "auto"


def test_responses_generated_on_the_device_come_back_on_the_cpu():
    """A sampler's model on `DEVICE` generates; what it ships is on the CPU, and the
    learner's log-probabilities of the same responses stay on the model's device."""
    from verl_zmq.seq.hf import (
        Sampling,
        build_model,
        char_tokenizer,
        generate,
        pad_left,
        response_logprobs,
    )

    torch.manual_seed(0)
    job = load_job(CONFIGS / "reverse_hf_grpo.toml")
    tok = char_tokenizer()
    model = build_model(job.algorithm.policy, tok).to(DEVICE)
    prompt, mask = pad_left([tok.encode("123"), tok.encode("4567")], tok.pad_token_id)
    g = generate(model, prompt, mask, Sampling(n=2, temperature=1.0, max_new_tokens=6),
                 tok.eos_token_id, tok.pad_token_id)
    assert {t.device.type for t in (g.response, g.mask, g.logp)} == {"cpu"}
    assert g.response.shape == (4, 6)
    lp = response_logprobs(model, prompt.repeat_interleave(2, 0), mask.repeat_interleave(2, 0),
                           g.response, g.mask)
    assert lp.device.type == torch.device(DEVICE).type
    assert torch.allclose(lp.cpu(), g.logp, atol=1e-4)
