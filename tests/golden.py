"""Golden pins of behaviour that a change of shape must keep: each algorithm's
metrics and resulting policy parameters over three updates on a fixed batch
and seed, and the `--dry-run` plan of every shipped job.

`python -m tests.golden --write` records them into tests/data/golden/; the tests
in `tests/test_golden.py` compare against those files. Record only when a
behaviour change is intended, and say so in the commit.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).resolve().parent / "data" / "golden"
CONFIGS = ROOT / "configs"
UPDATES = 3


def _collected_batch(job, algo, spec, fragments: int) -> dict[str, np.ndarray]:
    from verl_zmq.batch import job_layout
    from verl_zmq.envs.make import make_vector_env
    from verl_zmq.sampling.collector import EnvCollector

    venv, seeds = make_vector_env(job.environment, job.sampling.num_envs_per_worker, 0, 1)
    col = EnvCollector(job, algo, venv, seeds)
    frags = [col.collect()[0] for _ in range(fragments)]
    venv.close()
    return job_layout(job, spec).concat(frags)


def _transitions(spec, n: int = 64) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    f = np.float32
    obs_dim = int(np.prod(spec.obs_shape))
    action = (rng.integers(0, spec.n_actions, n) if spec.discrete
              else rng.uniform(-1, 1, (n, spec.n_actions)).astype(f))
    return {"obs": rng.standard_normal((n, obs_dim)).astype(f), "action": action,
            "reward": rng.standard_normal(n).astype(f),
            "next_obs": rng.standard_normal((n, obs_dim)).astype(f),
            "discount": (0.99 * (rng.random(n) > 0.1)).astype(f),
            "weight": rng.uniform(0.5, 1.0, n).astype(f)}


# one on-policy update of two epochs of 32-step minibatches over 2 x 2 x 16 steps
SMALL_PPO = ("algorithm.params.batch_size=64", "algorithm.params.minibatch_size=32",
             "algorithm.params.n_epochs=2", "sampling.fragment_length=16",
             "sampling.num_envs_per_worker=2")
SEQ = ("sampling.num_envs_per_worker=16", "environment.kwargs={group_size=8}")

# name: (job file, overrides, on-policy fragments to collect or 0 for transitions)
CASES: dict[str, tuple[str, tuple[str, ...], int]] = {
    "ppo": ("cartpole_ppo.toml", SMALL_PPO, 2),
    "ppo_vtrace": ("cartpole_ppo.toml", SMALL_PPO + ("algorithm.params.vtrace=true",), 2),
    "ppo_pendulum": ("cartpole_ppo.toml", SMALL_PPO + ('environment.id="Pendulum-v1"',
                                                       "environment.normalize_obs=true"), 2),
    "dapo": ("cartpole_dapo.toml", SMALL_PPO, 2),
    "grpo": ("reverse_grpo.toml", SEQ, 2),
    "grpo_seq_sum": ("reverse_grpo.toml",
                     SEQ + ('algorithm.params.loss_agg="seq-mean-token-sum"',), 2),
    "ppo_reverse": ("reverse_ppo.toml", ("sampling.num_envs_per_worker=16",), 2),
    "dqn": ("cartpole_dqn.toml", (), 0),
    "sac": ("pendulum_sac.toml", (), 0),
}


def _fingerprint(arrays: dict[str, np.ndarray]) -> dict[str, list[float]]:
    """Per array: its sum, its L2 norm and a projection on fixed random weights:
    three numbers that move with any change of any element."""
    out = {}
    for k in sorted(arrays):
        a = np.asarray(arrays[k], np.float64).ravel()
        w = np.random.default_rng(len(a)).standard_normal(len(a))
        out[k] = [float(a.sum()), float(np.linalg.norm(a)), float(a @ w)]
    return out


def algorithm_case(name: str) -> dict:
    """Three updates of one case from a fixed seed: metrics and policy after each."""
    import torch

    from verl_zmq.algos import make_algorithm
    from verl_zmq.algos.base import Progress
    from verl_zmq.config import load_job
    from verl_zmq.envs.make import env_spec

    torch.set_num_threads(1)
    torch.manual_seed(0)
    path, overrides, fragments = CASES[name]
    job = load_job(CONFIGS / path, list(overrides))
    spec = env_spec(job.environment)
    algo = make_algorithm(job, spec)
    if hasattr(algo, "init_policy"):
        algo.init_policy()
    batch = (_collected_batch(job, algo, spec, fragments) if fragments
             else _transitions(spec))
    steps = []
    for u in range(UPDATES):
        out = algo.learn(batch, Progress(env_steps=1000 * (u + 1), fraction=0.1 * (u + 1)))
        metrics = {k: float(v) for k, v in sorted(out.metrics.items())
                   if isinstance(v, int | float | np.floating | np.integer)}
        pri = None if out.priorities is None else _fingerprint({"p": out.priorities})["p"]
        steps.append({"metrics": metrics, "priorities": pri,
                      "policy": _fingerprint(algo.policy_arrays())})
    return {"batch": _fingerprint({k: v for k, v in batch.items()
                                   if np.asarray(v).dtype.kind in "fiub"}),
            "updates": steps}


def dry_run_plan(job_file: str) -> str:
    """The plan `verl-launch --dry-run` prints for a shipped job (the planner's
    output: placements and commands; the env checks that come before it need
    each job's optional extras), with this machine's interpreter and checkout
    replaced by placeholders. In this process: the planner imports no torch."""
    from launcher import cli, launch

    job, rd, plan = launch.load(str(CONFIGS / job_file), str(CONFIGS / "hosts.local.txt"), (),
                                str(ROOT / "runs" / "golden"), None)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        cli.print_plan(plan, job, rd.resolve())
    out = buf.getvalue().replace(sys.executable, "<python>").replace(str(ROOT), "<root>")
    return re.sub(r"\d{8}-\d{6}", "<stamp>", out)


def shipped_jobs() -> list[str]:
    return sorted(p.name for p in CONFIGS.glob("*.toml"))


def write_all(only: Callable[[str], bool] = lambda _: True) -> None:
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for name in CASES:
        if only(name):
            (GOLDEN / f"algo_{name}.json").write_text(
                json.dumps(algorithm_case(name), indent=1, sort_keys=True) + "\n")
    for job in shipped_jobs():
        if only(job):
            (GOLDEN / f"plan_{job}.txt").write_text(dry_run_plan(job))


if __name__ == "__main__":
    if sys.argv[1:2] != ["--write"]:
        sys.exit("usage: python -m tests.golden --write [NAME ...]")
    names = set(sys.argv[2:])
    write_all(lambda n: not names or n in names)
