#!/usr/bin/env python
"""Time and env steps to a return: ours against Stable-Baselines3, one after the
other in one invocation, on the same task and machine.

Both sides are measured the same way: an evaluation of 10 deterministic
episodes on a separately seeded env every `interval` env steps; "reached" is
the first evaluation whose mean is at or above the target, else "> budget".
Printed per run: wall seconds from the first env step to the target, whole-
process wall seconds, env steps to the target; then the ratios ours/SB3. Ours
runs the job file with the zoo's hyperparameters set over it (gamma, GAE
lambda, entropy, epochs, batch, schedules), so the systems are compared.

    python tools/bench_learning.py {ppo-cartpole,sac-pendulum,dqn-cartpole} [--seeds 0]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _jobs import ROOT, events, launch, time_to_return

# rl-baselines3-zoo hyperparameters (hyperparams/ppo.yml, CartPole-v1)
ZOO = {
    "ppo-cartpole": dict(
        algo="PPO", env="CartPole-v1", n_envs=8, budget=100_000, interval=5_000,
        kwargs=dict(n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
                    ent_coef=0.0, learning_rate="lin_0.001", clip_range="lin_0.2"),
        job="configs/cartpole_ppo.toml",
        # ours runs the same hyperparameters and, like SB3, synchronous on-policy PPO
        # (samplers wait for each new policy), so the systems are compared, not the tuning
        ours=['sampling.mode="sync"', "algorithm.params.gamma=0.98",
              "algorithm.params.gae_lambda=0.8", "algorithm.params.ent_coef=0.0",
              "algorithm.params.n_epochs=20",
              "algorithm.params.batch_size=256", "algorithm.params.minibatch_size=256",
              "algorithm.params.learning_rate=0.001", 'algorithm.params.lr_schedule="linear"',
              "algorithm.params.clip_range=0.2", 'algorithm.params.clip_schedule="linear"']),
    "sac-pendulum": dict(
        algo="SAC", env="Pendulum-v1", n_envs=1, budget=20_000, interval=2_000,
        kwargs=dict(learning_rate=1e-3), job="configs/pendulum_sac.toml", target=-200.0),
    "dqn-cartpole": dict(
        algo="DQN", env="CartPole-v1", n_envs=1, budget=50_000, interval=2_500,
        kwargs=dict(learning_rate=2.3e-3, batch_size=64, buffer_size=100_000,
                    learning_starts=1000, gamma=0.99, target_update_interval=10,
                    train_freq=256, gradient_steps=128, exploration_fraction=0.16,
                    exploration_final_eps=0.04, policy_kwargs=dict(net_arch=[256, 256])),
        job="configs/cartpole_dqn.toml", target=475.0),
}

SB3_SCRIPT = r"""
import json, sys, time
t_proc = time.time()
import gymnasium as gym, torch
from stable_baselines3 import PPO, DQN, SAC
from stable_baselines3.common.callbacks import EvalCallback, StopTrainingOnRewardThreshold
from stable_baselines3.common.env_util import make_vec_env
cfg = json.loads(sys.argv[1])
torch.set_num_threads(1)
def sched(v):
    if isinstance(v, str) and v.startswith("lin_"):
        x = float(v[4:]); return lambda p: p * x
    return v
kw = {k: sched(v) for k, v in cfg["kwargs"].items()}
env = make_vec_env(cfg["env"], n_envs=cfg["n_envs"], seed=cfg["seed"])
eval_env = make_vec_env(cfg["env"], n_envs=1, seed=cfg["seed"] + 1_000_003)
model = {"PPO": PPO, "DQN": DQN, "SAC": SAC}[cfg["algo"]]("MlpPolicy", env, seed=cfg["seed"],
                                                           verbose=0, **kw)
stop = StopTrainingOnRewardThreshold(reward_threshold=cfg["target"], verbose=0)
cb = EvalCallback(eval_env, n_eval_episodes=10, eval_freq=max(1, cfg["interval"] // cfg["n_envs"]),
                  deterministic=True, callback_on_new_best=stop, verbose=0)
t0 = time.time()
model.learn(cfg["budget"], callback=cb)
reached = cb.best_mean_reward >= cfg["target"]
print(json.dumps({"t_proc": t_proc, "t_first_step": t0, "t_end": time.time(),
                  "reached": bool(reached), "steps": int(model.num_timesteps) if reached else None,
                  "best": float(cb.best_mean_reward)}))
"""


def run_sb3(cfg: dict, seed: int, target: float) -> dict:
    payload = json.dumps({**cfg, "seed": seed, "target": target})
    t0 = time.time()
    r = subprocess.run([sys.executable, "-c", SB3_SCRIPT, payload], capture_output=True, text=True)
    wall = time.time() - t0
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])
    out = json.loads(r.stdout.strip().splitlines()[-1])
    to_target = (out["t_end"] - out["t_first_step"]) if out["reached"] else None
    return {"to_target_s": to_target, "wall_s": wall, "steps": out["steps"], "best": out["best"]}


def run_ours(cfg: dict, seed: int, target: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        t0 = time.time()
        launch(ROOT / cfg["job"], run, [f"experiment.seed={seed}",
                                        f"evaluation.stop_at_return={target}",
                                        f"evaluation.interval_steps={cfg['interval']}",
                                        f"training.total_timesteps={cfg['budget']}",
                                        *cfg.get("ours", [])],
               timeout=3600)
        wall = time.time() - t0
        ts, steps = time_to_return(run, target)
        starts = [e["ts"] for p in (run / "logs").glob("sampler-*.jsonl") for e in events(p)
                  if e.get("event") == "sampling_started"]
        summary = json.loads((run / "summary.json").read_text())
    to_target = ts - min(starts) if ts is not None and starts else None
    return {"to_target_s": to_target, "wall_s": wall, "steps": steps,
            "best": summary.get("best_eval_return")}


def fmt(x, spec=".1f") -> str:
    return "> budget" if x is None else format(x, spec)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bench", choices=sorted(ZOO))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--target", type=float, default=None,
                    help="return to reach (default: 475 for CartPole, -200 for Pendulum)")
    args = ap.parse_args()
    cfg = ZOO[args.bench]
    args.target = args.target if args.target is not None else cfg.get("target", 475.0)
    print(f"{'who':<6}{'seed':>5}{'s to target':>13}{'process s':>11}{'steps':>10}{'best':>8}")
    for seed in args.seeds:
        sb3 = run_sb3(cfg, seed, args.target)
        ours = run_ours(cfg, seed, args.target)
        for who, r in (("sb3", sb3), ("ours", ours)):
            print(f"{who:<6}{seed:>5}{fmt(r['to_target_s']):>13}{r['wall_s']:>11.1f}"
                  f"{fmt(r['steps'], ','):>10}{fmt(r['best']):>8}", flush=True)
        ratio = (ours["to_target_s"] / sb3["to_target_s"]
                 if ours["to_target_s"] and sb3["to_target_s"] else None)
        print(f"ratio ours/sb3, seed {seed}: from first env step {fmt(ratio, '.2f')}, "
              f"whole process {ours['wall_s'] / sb3['wall_s']:.2f}", flush=True)


if __name__ == "__main__":
    main()
