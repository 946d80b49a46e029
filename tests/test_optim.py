"""Our Adam (verl_zmq/algos/optim.py) against torch.optim.Adam(foreach=True): the
same parameters bit for bit after many steps (with a changing learning rate and
weight decay), state dicts that load either way, and a learner's update that
never imports torch's compiler."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from tests.conftest import ROOT
from verl_zmq.algos.optim import Adam


def _nets(seed: int = 0) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(seed)
    a = torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    b = torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    b.load_state_dict(a.state_dict())
    return a, b


def _train(net: torch.nn.Module, opt, steps: int, seed: int = 1) -> None:
    g = torch.Generator().manual_seed(seed)
    for i in range(steps):
        x = torch.randn(32, 5, generator=g)
        opt.param_groups[0]["lr"] = 1e-2 * (1 - i / (2 * steps))  # a schedule
        opt.zero_grad(set_to_none=True)
        net(x).pow(2).mean().backward()
        opt.step()


@pytest.mark.parametrize("kw", [{"eps": 1e-5}, {"weight_decay": 0.01, "betas": (0.8, 0.99)}])
def test_steps_match_torch_bit_for_bit(kw):
    ours, theirs = _nets()
    _train(ours, Adam(ours.parameters(), lr=1e-2, **kw), 50)
    _train(theirs, torch.optim.Adam(theirs.parameters(), lr=1e-2, foreach=True, **kw), 50)
    for p, q in zip(ours.parameters(), theirs.parameters(), strict=True):
        assert torch.equal(p, q)


def test_state_dicts_load_either_way_and_continue_alike():
    ours, theirs = _nets()
    a, b = Adam(ours.parameters(), lr=1e-2), torch.optim.Adam(theirs.parameters(), lr=1e-2,
                                                                foreach=True)
    _train(ours, a, 10)
    _train(theirs, b, 10)
    # swap: each continues from the other's state dict (as a checkpoint would hand it)
    a2, b2 = Adam(theirs.parameters(), lr=1.0), torch.optim.Adam(ours.parameters(), lr=1.0,
                                                                   foreach=True)
    a2.load_state_dict(b.state_dict())
    b2.load_state_dict(a.state_dict())
    assert a2.param_groups[0]["lr"] == b.param_groups[0]["lr"]
    _train(theirs, a2, 10, seed=2)
    _train(ours, b2, 10, seed=2)
    for p, q in zip(ours.parameters(), theirs.parameters(), strict=True):
        assert torch.equal(p, q)


def test_a_state_dict_for_other_parameters_is_refused():
    ours, _ = _nets()
    a = Adam(ours.parameters(), lr=1e-2)
    _train(ours, a, 2)
    other = Adam([torch.zeros(3, requires_grad=True)], lr=1e-2)
    with pytest.raises(ValueError, match="4 parameters"):
        other.load_state_dict(a.state_dict())


def test_a_ppo_update_and_its_checkpoint_do_not_import_the_compiler():
    probe = (
        "import sys, torch\n"
        "from verl_zmq.algos.ppo import PPO\n"
        "from verl_zmq.config import load_job\n"
        "from verl_zmq.envs.make import EnvSpec\n"
        "from verl_zmq.wire.samples import cartpole_fragment\n"
        "algo = PPO(load_job('configs/cartpole_ppo.toml', ['algorithm.params.n_epochs=2']),\n"
        "           EnvSpec((4,), True, 2, ()))\n"
        "algo.learn(cartpole_fragment(32, 4))\n"
        "algo.load_state_dict(algo.state_dict())\n"
        "print('torch._dynamo' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert out.stdout.strip() == "False", out.stdout + out.stderr
