#!/usr/bin/env python
"""Time and env steps to a return: ours against Stable-Baselines3, one after the
other in one invocation, on the same task and machine.

Both sides are measured the same way: an evaluation of 10 deterministic
episodes on a separately seeded env every `interval` env steps; "reached" is
the first evaluation whose mean is at or above the target, else "> budget".
Printed per run: wall seconds from the first env step to the target, whole-
process wall seconds, env steps to the target; then the ratios ours/SB3. Ours
runs the job file with the zoo's hyperparameters set over it (gamma, GAE
lambda, entropy, epochs, batch, schedules), so the systems are compared; where
the job file's own hyperparameters differ (ppo-cartpole), "shipped" also runs
it exactly as shipped.

    python tools/bench/learning.py {ppo-cartpole,sac-pendulum,dqn-cartpole} [--seeds 0]
    python tools/bench/learning.py lunarlander-ppo [--seeds 0 1 2]    # box2d extra; long
    python tools/bench/learning.py dapo-cartpole [--seeds 0 1 2]
    python tools/bench/learning.py bc-cartpole [--seeds 0 1 2]
    python tools/bench/learning.py ppo-cartpole --vs sample-factory [--seeds 0 1 2]

`dapo-cartpole` runs `tools/bench/dapo.py`: decentralised DAPO (4 peers, one
sampler of 8 envs each) as shipped, with the group's batch shared and exact
mixing, and with mixing off, against single-learner PPO fed by the same 4 x 8
envs with the global batch and with 4 times it: total env steps (all trainers
together) until every trainer has an evaluation at or above the target.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: tools.*
from tools.harness import ROOT, launch, sampling_start, time_to_return  # noqa: E402

# rl-baselines3-zoo hyperparameters (hyperparams/ppo.yml, CartPole-v1)
ZOO = {
    "ppo-cartpole": dict(
        algo="PPO", env="CartPole-v1", n_envs=8, budget=100_000, interval=5_000,
        kwargs=dict(n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
                    ent_coef=0.0, learning_rate="lin_0.001", clip_range="lin_0.2"),
        job="configs/cartpole_ppo.toml",
        # ours runs the job as shipped (asynchronous samplers) with the same
        # hyperparameters, so the systems are compared, not the tuning; --sync makes
        # ours synchronous on-policy PPO like SB3 (samplers wait for each new policy)
        ours=["algorithm.params.gamma=0.98",
              "algorithm.params.gae_lambda=0.8", "algorithm.params.ent_coef=0.0",
              "algorithm.params.n_epochs=20",
              "algorithm.params.batch_size=256", "algorithm.params.minibatch_size=256",
              "algorithm.params.learning_rate=0.001", 'algorithm.params.lr_schedule="linear"',
              "algorithm.params.clip_range=0.2", 'algorithm.params.clip_schedule="linear"']),
    "lunarlander-ppo": dict(  # hyperparams/ppo.yml, LunarLander-v2 (v3 here: same task)
        algo="PPO", env="LunarLander-v3", n_envs=16, budget=1_000_000, interval=20_000,
        kwargs=dict(n_steps=1024, batch_size=64, gae_lambda=0.98, gamma=0.999, n_epochs=4,
                    ent_coef=0.01),
        job="configs/lunarlander_ppo.toml", target=200.0),
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
        first = sampling_start(run)
        summary = json.loads((run / "summary.json").read_text())
    to_target = ts - first if ts is not None and first is not None else None
    return {"to_target_s": to_target, "wall_s": wall, "steps": steps,
            "best": summary.get("best_eval_return")}


def bench_bc(seeds: list[int], target: float) -> None:
    """PPO with a behaviour-cloning term (mixing_ratio 0.3) on 10 demonstration
    episodes of a trained CartPole policy, against PPO without, same seeds."""
    job = ROOT / "configs/cartpole_ppo.toml"
    with tempfile.TemporaryDirectory() as tmp:
        teacher = Path(tmp) / "teacher"
        launch(job, teacher, ["experiment.seed=1000", "evaluation.stop_at_return=500"],
               timeout=900)
        demos = Path(tmp) / "demos.npz"
        r = subprocess.run([sys.executable, "-m", "verl_zmq.cli", "record",
                            str(teacher / "checkpoints" / "best.pt"), "--episodes", "10",
                            "-o", str(demos)], capture_output=True, text=True, cwd=ROOT)
        print(r.stdout.strip() or r.stderr[-500:], flush=True)
        print(f"{'who':<6}{'seed':>5}{'s to target':>13}{'process s':>11}{'steps':>10}")
        steps = {"bc": [], "ppo": []}
        for seed in seeds:
            for who in ("bc", "ppo"):
                over = [f"experiment.seed={seed}", f"evaluation.stop_at_return={target}"]
                if who == "bc":
                    over += [f'algorithm.bc.demos="{demos}"', "algorithm.bc.mixing_ratio=0.3"]
                run = Path(tmp) / f"{who}-{seed}"
                t0 = time.time()
                launch(job, run, over, timeout=900)
                wall = time.time() - t0
                ts, n = time_to_return(run, target)
                first = sampling_start(run)
                to = ts - first if ts is not None and first is not None else None
                steps[who].append(n)
                print(f"{who:<6}{seed:>5}{fmt(to):>13}{wall:>11.1f}{fmt(n, ','):>10}",
                      flush=True)
    if all(x is not None for x in steps["bc"] + steps["ppo"]):
        b, p = sum(steps["bc"]) / len(seeds), sum(steps["ppo"]) / len(seeds)
        print(f"mean env steps to {target:g}: bc {b:,.0f}, ppo {p:,.0f}, ratio bc/ppo {b / p:.2f}")
    else:
        print(f"a run did not reach {target:g} (> budget)")


def fmt(x, spec=".1f") -> str:
    return "> budget" if x is None else format(x, spec)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bench", choices=sorted([*ZOO, "dapo-cartpole", "bc-cartpole"]))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--target", type=float, default=None,
                    help="return to reach (default: 475 for CartPole, -200 for Pendulum)")
    ap.add_argument("--vs", choices=["sb3", "sample-factory"], default="sb3",
                    help="the baseline: Stable-Baselines3, or Sample Factory 2.1.1 (APPO, in "
                         "a virtual environment of its own; tools/bench/vs_sf.py)")
    ap.add_argument("--sync", action="store_true",
                    help="ours with synchronous samplers (each fragment from the newest policy)")
    ap.add_argument("--set", dest="overrides", action="append", default=[],
                    help="a job override for ours, after the zoo's (section.key=value)")
    args = ap.parse_args()
    if args.vs == "sample-factory":  # its arms live in tools/bench/vs_sf.py
        from tools.bench import vs_sf

        if args.bench not in vs_sf.TASKS:
            sys.exit(f"--vs sample-factory: {args.bench} has no Sample Factory arm; "
                     f"one of {', '.join(vs_sf.TASKS)}")
        vs_sf.main(args.bench, args.seeds)
        return
    if args.bench == "dapo-cartpole":  # its arms live in tools/bench/dapo.py
        from tools.bench import dapo

        dapo.main(["--seeds", *map(str, args.seeds), "--target",
                         str(args.target if args.target is not None else 475.0)])
        return
    if args.bench == "bc-cartpole":
        bench_bc(args.seeds, args.target if args.target is not None else 475.0)
        return
    cfg = ZOO[args.bench]
    if importlib.util.find_spec("stable_baselines3") is None:
        sys.exit("bench_learning: Stable-Baselines3 is not installed; it is the `bench` "
                 "extra:\n    pip install -e '.[bench]'")
    args.target = args.target if args.target is not None else cfg.get("target", 475.0)
    # ours with the zoo's hyperparameters (the systems compared) and, where those
    # differ from the job file's, the job exactly as shipped too
    arms = {"ours": [*cfg.get("ours", []), *(['sampling.mode="sync"'] if args.sync else []),
                     *args.overrides]}
    if cfg.get("ours"):
        arms["shipped"] = list(args.overrides)
    print(f"{'who':<8}{'seed':>5}{'s to target':>13}{'process s':>11}{'steps':>10}{'best':>8}")
    walls: dict[str, list[float]] = {"sb3": [], **{a: [] for a in arms}}
    for seed in args.seeds:
        got = {"sb3": run_sb3(cfg, seed, args.target)}
        for arm, over in arms.items():
            got[arm] = run_ours({**cfg, "ours": over}, seed, args.target)
        sb3 = got["sb3"]
        for who, r in got.items():
            print(f"{who:<8}{seed:>5}{fmt(r['to_target_s']):>13}{r['wall_s']:>11.1f}"
                  f"{fmt(r['steps'], ','):>10}{fmt(r['best']):>8}", flush=True)
            walls[who].append(r["wall_s"])
        for arm in arms:
            r = got[arm]
            ratio = (r["to_target_s"] / sb3["to_target_s"]
                     if r["to_target_s"] and sb3["to_target_s"] else None)
            print(f"ratio {arm}/sb3, seed {seed}: from first env step {fmt(ratio, '.2f')}, "
                  f"whole process {r['wall_s'] / sb3['wall_s']:.2f}", flush=True)
    if len(args.seeds) > 1:
        m = {k: sum(v) / len(v) for k, v in walls.items()}
        print("\nmean whole-process wall: " + ", ".join(f"{k} {v:.1f} s" for k, v in m.items())
              + "; ratio of means " + ", ".join(f"{a}/sb3 {m[a] / m['sb3']:.2f}" for a in arms))


if __name__ == "__main__":
    main()
