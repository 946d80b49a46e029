"""Learning from demonstrations: `verl record` writes the documented format,
malformed files are refused by `verl check` with what is wrong, the
behaviour-cloning weight decays as specified, and the term really clones
(PPO and SAC): the demonstrated actions' log-likelihood rises."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.conftest import CONFIGS, verl_here
from tests.test_export_serve import _checkpoint

GOOD = {"obs": np.zeros((6, 4), np.float32), "action": np.array([0, 1, 0, 1, 1, 0]),
        "reward": np.ones(6, np.float32), "terminated": np.r_[np.zeros(5, bool), True],
        "truncated": np.zeros(6, bool), "episode_start": np.array([0, 3]),
        "format": np.array([1])}


def _write(path, **changes):
    arrays = {**GOOD, **changes}
    np.savez(path, **{k: v for k, v in arrays.items() if v is not None})
    return path


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_record_writes_the_documented_format(tmp_path):
    ckpt, _ = _checkpoint(tmp_path, "ppo-discrete")
    out = tmp_path / "demos.npz"
    r = verl_here("record", str(ckpt), "--episodes", "3", "--seed", "4", "-o", str(out))
    assert r.returncode == 0, r.stderr
    with np.load(out, allow_pickle=False) as z:
        a = {k: z[k] for k in z.files}
    n = len(a["obs"])
    assert a["obs"].shape == (n, 4) and a["obs"].dtype == np.float32
    assert a["action"].shape == (n,) and a["action"].dtype == np.int64
    assert len(a["episode_start"]) == 3 and a["episode_start"][0] == 0
    ends = np.flatnonzero(a["terminated"] | a["truncated"])
    assert ends.tolist() == (np.r_[a["episode_start"][1:], n] - 1).tolist()
    assert f"{n:,} steps" in r.stdout
    job = tmp_path / "job.toml"
    job.write_text((CONFIGS / "cartpole_ppo.toml").read_text()
                   + f'\n[algorithm.bc]\ndemos = "{out}"\nmixing_ratio = 0.3\n')
    assert verl_here("check", str(job)).returncode == 0


@pytest.mark.parametrize("changes, why", [
    ({"obs": np.zeros((6, 5), np.float32)}, "obs has shape"),
    ({"action": np.array([0, 1, 2, 1, 1, 0])}, "action must be [N] integers in [0, 2)"),
    ({"reward": np.ones(5, np.float32)}, "reward has 5 steps"),
    ({"episode_start": np.array([1, 3])}, "episode_start"),
    ({"truncated": None}, "missing arrays ['truncated']"),
    ({"obs": np.full((6, 4), np.nan, np.float32)}, "finite"),
])
def test_check_refuses_malformed_demos(tmp_path, changes, why):
    demos = _write(tmp_path / "bad.npz", **changes)
    job = tmp_path / "job.toml"
    job.write_text((CONFIGS / "cartpole_ppo.toml").read_text()
                   + f'\n[algorithm.bc]\ndemos = "{demos}"\nmixing_ratio = 0.3\n')
    r = verl_here("check", str(job))
    assert r.returncode == 2 and "algorithm.bc.demos" in r.stderr and why in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_check_refuses_pickles_and_non_npz(tmp_path):
    for name, data in (("obj.npz", None), ("junk.npz", b"not a zip")):
        path = tmp_path / name
        if data is None:
            np.savez(path, **{**GOOD, "obs": np.array([object()] * 6, dtype=object)})
        else:
            path.write_bytes(data)
        job = tmp_path / "job.toml"
        job.write_text((CONFIGS / "cartpole_ppo.toml").read_text()
                       + f'\n[algorithm.bc]\ndemos = "{path}"\nmixing_ratio = 0.3\n')
        r = verl_here("check", str(job))
        assert r.returncode == 2 and "not a readable .npz" in r.stderr, r.stderr


def test_bc_weight_decays_linearly():
    from verl_zmq.config import BehaviourCloning
    from verl_zmq.demos import BCTerm

    t = BCTerm.__new__(BCTerm)
    t.cfg = BehaviourCloning(demos="x", mixing_ratio=0.3, decay_steps=1000)
    assert [t.weight(s) for s in (0, 500, 1000, 5000)] == pytest.approx([0.3, 0.15, 0.0, 0.0])
    t.cfg = BehaviourCloning(demos="x", mixing_ratio=0.3)
    assert t.weight(10**9) == 0.3


@pytest.mark.parametrize("name", ["ppo-discrete", "sac"])
def test_behaviour_cloning_raises_the_demonstrations_likelihood(tmp_path, name):
    """With only the BC term driving the policy (RL terms on a batch without signal),
    the policy comes to prefer the demonstrated actions."""
    from verl_zmq.config import load_job
    from verl_zmq.envs.make import env_spec
    from verl_zmq.ops.export import load_policy

    torch.manual_seed(0)
    ckpt, obs = _checkpoint(tmp_path, name)
    teacher = load_policy(ckpt)
    demos = tmp_path / "d.npz"
    acts = teacher.actions(obs)
    n = len(obs)
    np.savez(demos, obs=obs, action=acts, reward=np.zeros(n, np.float32),
             terminated=np.zeros(n, bool), truncated=np.zeros(n, bool),
             episode_start=np.array([0]), format=np.array([1]))
    job_file = {"ppo-discrete": "cartpole_ppo.toml", "sac": "pendulum_sac.toml"}[name]
    job = load_job(CONFIGS / job_file, [f'algorithm.bc.demos="{demos}"',
                                        "algorithm.bc.mixing_ratio=5.0"])
    from verl_zmq.algos import make_algorithm

    norm = lambda x: teacher.rms.normalize(x, job.environment.clip_obs)  # noqa: E731
    student = make_algorithm(job, env_spec(job.environment), obs_transform=norm)
    x = torch.as_tensor(norm(obs))

    def agreement() -> float:
        a, _ = student.act(x.numpy(), deterministic=True)
        a = student.env_action(a)
        if name == "sac":
            return -float(np.abs(a - acts).mean())
        return float((a == acts).mean())

    before = agreement()
    batch = _flat_batch(student, x.numpy(), name)
    for _ in range(30):
        stats = student.learn(batch).metrics
    assert "losses/bc_loss" in stats and stats["charts/bc_weight"] == 5.0
    assert agreement() > before + (0.1 if name != "sac" else 0.05), (before, agreement())


def _flat_batch(algo, obs: np.ndarray, name: str) -> dict:
    if name == "sac":  # an off-policy batch with zero rewards
        n = 256
        return {"obs": obs[:n], "next_obs": obs[:n], "action": np.zeros((n, 1), np.float32),
                "reward": np.zeros(n, np.float32), "discount": np.zeros(n, np.float32),
                "weight": np.ones(n, np.float32)}
    T, E = 32, 8  # a PPO fragment layout with zero rewards and values: no RL signal
    o = obs[: T * E].reshape(T, E, -1)
    z = np.zeros((T, E), np.float32)
    return {"obs": o, "action": np.zeros((T, E), np.int64), "reward": z, "value": z,
            "logp": np.full((T, E), np.log(0.5), np.float32),
            "terminated": np.zeros((T, E), bool), "truncated": np.zeros((T, E), bool),
            "valid": np.ones((T, E), bool), "bootstrap_value": np.zeros(E, np.float32),
            "bootstrap_obs": o[-1], "bootstrap_logp": np.zeros(E, np.float32)}
