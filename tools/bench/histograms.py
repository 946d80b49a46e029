#!/usr/bin/env python
"""What `logging.histograms_interval` costs a learner: one PPO update of the main
job's batch against one histograms snapshot (actions, advantages, weights and
their norms), in one process, best of `--repeat`.

    python tools/bench/histograms.py
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: verl_zmq

import torch  # noqa: E402

from verl_zmq.algos.ppo import PPO  # noqa: E402
from verl_zmq.config import load_job  # noqa: E402
from verl_zmq.envs.spec import EnvSpec  # noqa: E402
from verl_zmq.learning.histograms import snapshot  # noqa: E402
from verl_zmq.wire.samples import cartpole_fragment  # noqa: E402


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=20)
    a = ap.parse_args()
    torch.set_num_threads(1)
    job = load_job(Path(__file__).resolve().parents[2] / "configs" / "cartpole_ppo.toml")
    algo = PPO(job, EnvSpec((4,), True, 2, ()))
    batch = cartpole_fragment(job.algorithm.params.batch_size // 8, 8)
    learned = algo.learn(batch)
    update = best(lambda: algo.learn(batch), a.repeat)
    snap = best(lambda: snapshot(batch, learned.samples, algo.policy_module()), a.repeat)
    size = len(json.dumps(snapshot(batch, learned.samples, algo.policy_module())))
    print(f"PPO update (CartPole, batch {job.algorithm.params.batch_size}, "
          f"{job.algorithm.params.n_epochs} epochs): {update * 1000:.2f} ms")
    print(f"histograms snapshot: {snap * 1000:.2f} ms ({snap / update:.1%} of an update), "
          f"event {size / 1024:.1f} KiB")


if __name__ == "__main__":
    main()
