"""docs/guides/extending.md as a reader runs it: each Python block written into the
file its first line names, in a folder outside the package; every part built
from the shipped jobs with only [algorithm] changed, used where the job says,
checked by `verl check` (and a misspelt one refused in one line), and a short
job trained with the network and the loss of one's own."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import CONFIGS, PY, ROOT, free_port_range

GUIDE = ROOT / "docs" / "guides" / "extending.md"
NET = 'algorithm.policy.network="mypkg.nets:two_towers"'
LOSS = 'algorithm.params.policy_loss="mypkg.losses:clipped_pulled_back"'


@pytest.fixture(scope="module")
def mypkg(tmp_path_factory):
    """The guide's modules in a folder of their own, importable as `mypkg`."""
    root = tmp_path_factory.mktemp("reader")
    (root / "mypkg").mkdir()
    (root / "mypkg" / "__init__.py").write_text("")
    blocks = re.findall(r"^```python\n(# (mypkg/\S+)\n.*?)^```", GUIDE.read_text(), re.S | re.M)
    assert len(blocks) == 5, [b[1] for b in blocks]
    for text, path in blocks:
        (root / path).write_text(text)
    sys.path.insert(0, str(root))
    yield root
    sys.path.remove(str(root))
    for name in [m for m in sys.modules if m == "mypkg" or m.startswith("mypkg.")]:
        del sys.modules[name]


def _algo(job_file, *sets):
    from verl_zmq.algos import make_algorithm
    from verl_zmq.config import load_job
    from verl_zmq.envs.make import env_spec

    job = load_job(CONFIGS / job_file, list(sets))
    return job, make_algorithm(job, env_spec(job.environment))


def test_each_part_is_built_and_used_where_the_job_says(mypkg):
    import mypkg.advantages
    import mypkg.algo
    import mypkg.explore
    import mypkg.losses

    from verl_zmq.policy.own import OwnNet

    job, ppo = _algo("cartpole_ppo.toml", NET, LOSS,
                     'algorithm.params.adv_estimator="mypkg.advantages:monte_carlo"')
    assert isinstance(ppo.net, OwnNet) and not job.traits.numpy_actor  # acts in torch
    assert ppo.policy_loss_fn is mypkg.losses.clipped_pulled_back
    assert ppo.advantage_fn is mypkg.advantages.monte_carlo
    a, _ = ppo.act(np.zeros((3, 4), np.float32))
    assert a.shape == (3,)
    _, dqn = _algo("cartpole_dqn.toml", 'algorithm.params.exploration="mypkg.explore:halving"')
    assert dqn.epsilon(10_000) == pytest.approx(mypkg.explore.halving(10_000, 0, 1))
    job, own = _algo("cartpole_ppo.toml", 'algorithm.name="mypkg.algo:AnnealedEntropyPPO"',
                     "algorithm.params.ent_coef_end=0.0")
    assert isinstance(own, mypkg.algo.AnnealedEntropyPPO) and job.traits.on_policy


def test_verl_check_takes_them_and_refuses_a_misspelt_one_in_one_line(mypkg):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    check = [PY, "-m", "verl_zmq.cli", "check", str(CONFIGS / "cartpole_ppo.toml")]
    r = subprocess.run([*check, "--set", NET, "--set", LOSS], cwd=mypkg, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    bad = 'algorithm.params.policy_loss="mypkg.losses:clipped_puled_back"'
    r = subprocess.run([*check, "--set", bad], cwd=mypkg, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "has no 'clipped_puled_back' (did you mean mypkg.losses:clipped_pulled_back?)" \
        in r.stderr
    r = subprocess.run([*check, "--set", 'algorithm.policy.network="mypkg.nets:TwoTowers"'],
                       cwd=mypkg, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "TwoTowers(spec, policy) raised TypeError" in r.stderr, r.stderr


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_a_job_trains_with_the_network_and_the_loss_of_ones_own(mypkg):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    lo, hi = free_port_range()
    r = subprocess.run([PY, "-m", "launcher", "local", str(CONFIGS / "cartpole_ppo.toml"),
                        "--run-dir", "run", "--set", NET, "--set", LOSS,
                        "--set", f"launch.port_range=[{lo}, {hi}]",
                        "--set", "training.total_timesteps=4000",
                        "--set", "evaluation.interval_steps=2000", "--set", "launch.standby=[]"],
                       cwd=mypkg, env=env, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads((mypkg / "run" / "summary.json").read_text())
    assert summary["status"] == "done" and summary["env_steps"] >= 4000
    events = [json.loads(x) for x in (mypkg / "run" / "logs" / "learner-0.jsonl").read_text()
              .splitlines() if x.startswith("{")]
    assert any(e.get("event") == "first_update" for e in events)
