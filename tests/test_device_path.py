"""The Hugging Face learner and sampler put every tensor on the device through
one path: run on the CPU under a checker (tests/device_path.py) that records an
op mixing a tensor on the device path with one built off it, which on a GPU
would raise; the checker itself catches such an op."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402

from tests import test_hf_keys  # noqa: E402
from tests.device_path import OffPath  # noqa: E402
from verl_zmq.config import load_job  # noqa: E402

JOB = test_hf_keys.JOB
hf_batch = test_hf_keys.fixed  # the fixture: the job's settings and a batch of responses


def _built_off_the_path(model: torch.nn.Module) -> torch.Tensor:
    ids = torch.tensor([[5, 6, 7]])  # a batch built on the CPU and never moved
    return model(input_ids=ids.to(next(model.parameters()).device)).logits + torch.ones(1, 3, 1)


def test_the_checker_catches_a_tensor_built_off_the_path(hf_batch):
    from verl_zmq.algos import make_algorithm

    base, spec, _ = hf_batch
    algo = make_algorithm(load_job(JOB, base), spec)
    with OffPath([algo.model], watch=("test_device_path",)) as mode:
        _built_off_the_path(algo.model)
    assert len(mode.found) == 1 and "off the device path" in mode.found[0], mode.found


@pytest.mark.parametrize("amp", ["none", "bf16"])
def test_the_learner_and_the_sampler_stay_on_the_path(hf_batch, amp):
    from verl_zmq.algos import make_algorithm
    from verl_zmq.seq.generate import GenerateCollector

    base, spec, batch = hf_batch
    sets = [*base, f"training.amp=\"{amp}\"", "algorithm.params.kl_coef=0.1",
            "algorithm.params.ent_coef=0.01", "algorithm.params.micro_batch_size=5"]
    job = load_job(JOB, sets)
    torch.manual_seed(0)
    learner = make_algorithm(job, spec)
    with OffPath([learner.model], watch=("verl_zmq/",)) as mode:
        learner.learn(dict(batch))
    assert mode.found == []
    sampler = make_algorithm(job, spec)
    col = GenerateCollector(job, sampler, 0, 1)
    with OffPath([sampler.model], watch=("verl_zmq/",)) as mode:
        col.collect()
    assert mode.found == []
