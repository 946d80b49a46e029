#!/usr/bin/env python
"""Envs that wait: env steps per second as the number of samplers grows, beside
Stable-Baselines3's `SubprocVecEnv` on the same env and total env count.

The env is `verl/Waiting-v0`: each step waits `--latency-ms` without the CPU
(`time.sleep`, like an env waiting on a simulator, a robot or a socket) and is
otherwise trivial. Each sampler holds 4 envs stepped at once
(`environment.vectorization = "threads"`: this env's steps can be begun, so all
four are begun and then finished in the sampler's own thread). For each count
of samplers:

- ours, drain: samplers, one FIFO shard and a learner that consumes without
  training (`training.learn = false`, no pacing), env steps/s counted by the
  learner after warm-up;
- ours, train: the same with the PPO learner training (configs/cartpole_ppo.toml's
  settings), paced as shipped; where it stops growing, the roles' metrics say
  which is the bottleneck (the learner's share of time in updates, the samplers'
  waits);
- SB3 SubprocVecEnv: the same number of envs (4 per sampler), one process each,
  random actions, no training; and SB3 `PPO.learn` on it (`--sb3-learn`) with
  ours' minibatch (256) and epochs (20).

    python tools/bench/waiting.py --latency-ms 5 --samplers 1 2 4 8 16 32 [--sb3-learn]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: tools.*
from tools.harness import ROOT, events, launch  # noqa: E402

JOB = ROOT / "configs" / "cartpole_ppo.toml"
ENVS = 4  # per sampler
LENGTH = 200


def _env_sets(latency: float) -> list[str]:
    return ["environment.id=verl/Waiting-v0",
            f"environment.kwargs={{latency_ms={latency}, length={LENGTH}}}",
            "environment.vectorization=threads", "environment.normalize_obs=false",
            f"sampling.num_envs_per_worker={ENVS}", "launch.evaluators=0",
            "logging.interval_s=1.0", "training.total_timesteps=1000000000"]


def _metrics(run: Path, member: str) -> list[dict]:
    return [e for e in events(run / "logs" / f"{member}.jsonl") if e.get("event") == "metrics"]


def ours(samplers: int, latency: float, seconds: float, learn: bool) -> dict:
    """Env steps/s at the learner after warm-up, and what the roles say of their time."""
    sets = [*_env_sets(latency), f"sampling.num_workers={samplers}"]
    if learn:
        sets += ["training.learn=true"]
    else:  # no pacing: samplers run as fast as their envs allow
        sets += ["training.learn=false", "sampling.max_fragments_ahead=0",
                 "sampling.lead_updates=0", "replay.capacity=65536"]
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        launch(JOB, run, sets, timeout=seconds + 20 + samplers)
        pts = [(e["ts"], e["learner/env_steps"], e.get("learner/learn_s", 0.0))
               for e in _metrics(run, "learner-0") if e.get("learner/env_steps", 0) > 0]
        waits = [m[-1].get("sampler/backpressure_wait_frac", 0.0)
                 for p in sorted((run / "logs").glob("sampler-*.jsonl"))
                 if (m := [e for e in events(p) if e.get("event") == "metrics"])]
    if len(pts) < 4:
        return {"steps_per_s": None}
    pts = pts[len(pts) // 3:]  # warm-up
    dt = pts[-1][0] - pts[0][0]
    return {"steps_per_s": (pts[-1][1] - pts[0][1]) / dt,
            "learner_busy": (pts[-1][2] - pts[0][2]) / dt,
            "sampler_backpressure": statistics.mean(waits) if waits else 0.0}


def sb3(n_envs: int, latency: float, seconds: float, learn: bool) -> float | None:
    """SB3's SubprocVecEnv on the same env: env steps/s, random actions (or PPO.learn)."""
    try:
        import gymnasium as gym
        import numpy as np
        from stable_baselines3 import PPO
        from stable_baselines3.common.vec_env import SubprocVecEnv
    except ImportError:
        return None

    def make() -> gym.Env:
        import verl_zmq.envs.tasks  # noqa: F401  (registers verl/Waiting-v0 in the worker)

        return gym.make("verl/Waiting-v0", latency_ms=latency, length=LENGTH)

    venv = SubprocVecEnv([make for _ in range(n_envs)])
    try:
        if learn:
            import torch

            torch.set_num_threads(1)
            # ours' PPO settings (configs/cartpole_ppo.toml): minibatches of 256 and 20
            # epochs, so both sides take as many gradient steps per env step (SB3's
            # default 10 epochs would do half the learner's work of ours)
            model = PPO("MlpPolicy", venv, n_steps=max(8, 2048 // n_envs), batch_size=256,
                        n_epochs=20, learning_rate=2e-3, verbose=0, device="cpu")
            model.learn(total_timesteps=n_envs * 16)  # warm-up
            before = model.num_timesteps
            # about `seconds` at the envs' own pace (4 envs a 5 ms step: 800 steps/s)
            steps = int(seconds * n_envs * 1000 / latency)
            t0 = time.perf_counter()
            model.learn(total_timesteps=steps, reset_num_timesteps=False)
            return (model.num_timesteps - before) / (time.perf_counter() - t0)
        venv.reset()
        rng = np.random.default_rng(0)
        for _ in range(5):
            venv.step(rng.integers(0, 2, n_envs))
        t0, steps = time.perf_counter(), 0
        while time.perf_counter() - t0 < seconds:
            venv.step(rng.integers(0, 2, n_envs))
            steps += n_envs
        return steps / (time.perf_counter() - t0)
    finally:
        venv.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--latency-ms", type=float, default=5.0)
    ap.add_argument("--samplers", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    ap.add_argument("--seconds", type=float, default=12.0)
    ap.add_argument("--sb3-learn", action="store_true", help="also SB3's PPO.learn")
    a = ap.parse_args()
    ideal = ENVS * 1000 / a.latency_ms
    print(f"verl/Waiting-v0, {a.latency_ms:g} ms a step, {ENVS} envs a sampler (begun together); "
          f"ideal {ideal:,.0f} env steps/s a sampler\n")
    print("| samplers (envs) | ours drain | x 1 sampler | ours train | learner busy | "
          "SB3 SubprocVecEnv | SB3 PPO.learn |")
    print("|---|---|---|---|---|---|---|")
    base = None
    rows = []
    for n in a.samplers:
        d = ours(n, a.latency_ms, a.seconds, learn=False)
        t = ours(n, a.latency_ms, a.seconds, learn=True)
        s = sb3(n * ENVS, a.latency_ms, a.seconds / 2, learn=False)
        sl = sb3(n * ENVS, a.latency_ms, a.seconds / 2, learn=True) if a.sb3_learn else None
        base = base or d["steps_per_s"]
        rows.append((n, d, t))

        def f(x: float | None) -> str:
            return "-" if x is None else f"{x:,.0f}"
        scale = f"{d['steps_per_s'] / base:.1f}" if d["steps_per_s"] and base else "-"
        print(f"| {n} ({n * ENVS}) | {f(d['steps_per_s'])} | {scale} | {f(t['steps_per_s'])} | "
              f"{t.get('learner_busy', 0):.2f} | {f(s)} | {f(sl)} |", flush=True)
    trained = [(n, t["steps_per_s"], t.get("learner_busy", 0.0)) for n, _, t in rows
               if t["steps_per_s"]]
    for (n0, r0, _), (n1, r1, busy) in zip(trained, trained[1:], strict=False):
        if r1 < 1.3 * r0:  # doubling the samplers no longer pays: the knee
            who = f"the learner (busy {busy:.0%} of the time)" if busy > 0.8 else \
                "the samplers and shard sharing 2 cores with it"
            print(f"\nknee with training: between {n0} and {n1} samplers ({r0:,.0f} -> "
                  f"{r1:,.0f} env steps/s); the bottleneck there: {who}")
            break


if __name__ == "__main__":
    main()
