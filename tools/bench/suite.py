#!/usr/bin/env python
"""The benchmark suite: each task's shipped job file run to rl-baselines3-zoo's
budget on several seeds, one fresh job after the other, against the zoo's
published return at that budget (benchmark.md of DLR-RM/rl-baselines3-zoo: one
run each, deterministic evaluation).

One row per task: the zoo's return and budget; ours at the same budget: the
final policy (the job's last checkpoint) evaluated as the zoo evaluates its
agents, on many episodes (`--final-episodes`, 100 by default, on episode seeds
the job never evaluated on), mean and lowest over seeds, and the best of the
job's own evaluations during training (`n_eval_episodes` each, on fixed seeds:
a handful of start states, so on tasks whose return depends on the start, such
as Pendulum, they say more about those states than about the policy); env
steps and wall seconds to the zoo's return in training (mean over the seeds
that got there); pass when the mean final return is at or above the zoo's and
no seed's is more than 10% of its magnitude below it.

    python tools/bench/suite.py --quick --seeds 0 1 2 [--markdown table.md]
    python tools/bench/suite.py --long                # BipedalWalker, HalfCheetah, LunarLander DQN
    python tools/bench/suite.py --tasks acrobot-dqn pendulum-sac --seeds 0
    python tools/bench/suite.py --tasks cartpole-dqn --set algorithm.params.lr_schedule=\"linear\"
    python tools/bench/suite.py --tasks acrobot-ppo --sb3   # and SB3 on the same seeds

With `--sb3` (the `bench` extra), each seed of a task with the zoo's SB3 settings
below also trains Stable-Baselines3 with them to the same budget, its final
model evaluated on the same episodes (`tools/bench/sb3_final.py`): the zoo's figure is
one run, and this says what its settings give on these seeds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: tools.*
from tools.bench.learning import ZOO  # noqa: E402
from tools.harness import ROOT, launch, launcher_start, time_to_return  # noqa: E402


@dataclass(frozen=True)
class Task:
    name: str
    job: str  # under configs/
    zoo_return: float
    budget: int  # env steps, the zoo's n_timesteps
    long: bool = False
    overrides: tuple[str, ...] = ()
    needs: str = ""  # the extra that installs its env


TASKS = [
    Task("cartpole-ppo", "cartpole_ppo.toml", 500.0, 100_000),
    Task("cartpole-dqn", "cartpole_dqn.toml", 500.0, 50_000),
    # no DAPO in the zoo: held to PPO's figure, with the budget counted over all peers
    Task("cartpole-dapo", "cartpole_dapo.toml", 500.0, 100_000),
    # memory: rl-baselines3-zoo's RecurrentPPO (sb3-contrib) on CartPoleNoVel-v1
    Task("cartpole-novel-lstm", "cartpole_novel_lstm.toml", 500.0, 100_000),
    Task("acrobot-ppo", "acrobot_ppo.toml", -73.506, 1_000_000),
    Task("acrobot-dqn", "acrobot_dqn.toml", -76.639, 100_000),
    Task("pendulum-sac", "pendulum_sac.toml", -156.995, 20_000),
    Task("mountaincar-sac", "mountaincar_sac.toml", 94.679, 50_000),
    Task("lunarlander-ppo", "lunarlander_ppo.toml", 242.119, 1_000_000, needs="box2d"),
    Task("lunarlander-dqn", "lunarlander_dqn.toml", 154.382, 100_000, long=True, needs="box2d"),
    Task("bipedalwalker-sac", "bipedalwalker_sac.toml", 297.668, 500_000, long=True,
         needs="box2d"),
    Task("halfcheetah-sac", "halfcheetah_sac.toml", 9535.451, 1_000_000, long=True,
         needs="mujoco"),
]
BY_NAME = {t.name: t for t in TASKS}

# rl-baselines3-zoo's settings for SB3 (hyperparams/*.yml), for `--sb3`
SB3 = {
    "cartpole-ppo": ZOO["ppo-cartpole"], "cartpole-dqn": ZOO["dqn-cartpole"],
    "pendulum-sac": ZOO["sac-pendulum"], "lunarlander-ppo": ZOO["lunarlander-ppo"],
    "cartpole-novel-lstm": dict(
        algo="RecurrentPPO", env="verl/CartPoleNoVel-v1", n_envs=8, normalize=True,
        kwargs=dict(n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
                    ent_coef=0.0, learning_rate="lin_0.001", clip_range="lin_0.2",
                    policy_kwargs=dict(ortho_init=False, activation_fn="relu",
                                       lstm_hidden_size=64, enable_critic_lstm=True,
                                       net_arch=dict(pi=[64], vf=[64])))),
    "acrobot-ppo": dict(algo="PPO", env="Acrobot-v1", n_envs=16, normalize=True,
                        kwargs=dict(n_steps=256, gae_lambda=0.94, gamma=0.99, n_epochs=4,
                                    ent_coef=0.0)),
}


FINAL_SEEDS = 1_000_000  # the final evaluation's first episode seed: apart from the job's


def checkpoint_return(run: Path, name: str, episodes: int) -> float | None:
    """The mean return of the run's checkpoint `name` (latest.pt: the final policy;
    best.pt: the evaluator's pick) over `episodes` episodes on seeds the job never
    evaluated on, each deterministic where the job evaluates deterministically (as
    the zoo: the mode, except where the job samples)."""
    import torch

    from verl_zmq.ops.export import load_policy
    from verl_zmq.policy.evaluate import evaluate

    found = sorted(run.glob(f"**/{name}"))
    if not found:
        return None
    torch.set_num_threads(2)
    lp = load_policy(found[0])
    rets = evaluate(lp.algo, lp.job, lp.rms, episodes, FINAL_SEEDS,
                    lp.job.evaluation.deterministic)
    return float(rets.mean())


def run_once(task: Task, seed: int, episodes: int, sets: tuple[str, ...] = ()) -> dict:
    """One fresh job to the task's budget (no early stop): its evaluations, and its
    final policy's return on `episodes` episodes."""
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        t0 = time.time()
        rc, wall = launch(ROOT / "configs" / task.job, run,
                          [f"experiment.seed={seed}", f"training.total_timesteps={task.budget}",
                           *task.overrides, *sets], timeout=6 * 3600)
        try:
            summary = json.loads((run / "summary.json").read_text())
        except (OSError, ValueError):
            summary = {}
        evals = summary.get("evaluations") or []
        ts, steps = time_to_return(run, task.zoo_return)
        start = launcher_start(run) or t0
        final = checkpoint_return(run, "latest.pt", episodes)
        # the model a user is handed: the evaluator's pick (confirmed by a second
        # evaluation where the job asks), measured afresh as the final policy is
        best_model = checkpoint_return(run, "best.pt", episodes)
    rets = [e["return_mean"] for e in evals]
    return {"rc": rc, "wall_s": wall, "final": final, "best_model": best_model,
            "last_eval": rets[-1] if rets else None,
            "best": max(rets) if rets else None, "steps": steps,
            "to_target_s": ts - start if ts is not None else None}


def run_sb3(task: Task, seed: int, episodes: int) -> tuple[float, float]:
    """SB3 with the zoo's settings for this task to its budget: its final model's
    mean return on the episodes ours is evaluated on, and its training seconds."""
    cfg = SB3[task.name]
    payload = {k: cfg[k] for k in ("algo", "env", "n_envs", "kwargs")}
    payload.update(normalize=cfg.get("normalize", False), budget=task.budget, seed=seed,
                   episodes=episodes, first_seed=FINAL_SEEDS)
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "bench" / "sb3_final.py"),
                        json.dumps(payload)], capture_output=True, text=True, timeout=6 * 3600)
    if r.returncode != 0:
        raise RuntimeError(f"sb3_final.py: {r.stderr[-2000:]}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    return out["final"], out["wall_s"]


def _fmt(x, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def _mean_min(xs: list) -> str:
    xs = [x for x in xs if x is not None]
    return f"{_fmt(statistics.mean(xs) if xs else None)} (min {_fmt(min(xs) if xs else None)})"


def row(task: Task, runs: list[dict]) -> dict:
    finals = [r["final"] for r in runs if r["final"] is not None]
    reached = [r for r in runs if r["steps"] is not None]
    floor = task.zoo_return - 0.1 * abs(task.zoo_return)
    ok = len(finals) == len(runs) and statistics.mean(finals) >= task.zoo_return \
        and min(finals) >= floor
    return {
        "task": task.name, "zoo": f"{task.zoo_return:g} @{task.budget // 1000}k",
        "final": _mean_min(finals),
        "best_model": _mean_min([r["best_model"] for r in runs]),
        "sb3": _mean_min([r.get("sb3") for r in runs]),
        "sb3_wall_s": _fmt(statistics.mean(r["sb3_wall_s"] for r in runs)
                           if all("sb3_wall_s" in r for r in runs) else None),
        "best": _mean_min([r["best"] for r in runs]),
        "reached": f"{len(reached)}/{len(runs)}",
        "steps": _fmt(statistics.mean(r["steps"] for r in reached) if reached else None, ",.0f"),
        "to_target_s": _fmt(statistics.mean(r["to_target_s"] for r in reached
                                            if r["to_target_s"] is not None)
                            if any(r["to_target_s"] is not None for r in reached) else None),
        "wall_s": _fmt(statistics.mean(r["wall_s"] for r in runs)),
        "pass": "pass" if ok else "FAIL",
    }


COLUMNS = [("task", "task"), ("zoo", "zoo return @budget"),
           ("final", "ours final, mean (min)"),
           ("best_model", "ours best.pt, mean (min)"),
           ("best", "ours best in training, mean (min)"),
           ("sb3", "SB3 zoo settings final, mean (min)"),
           ("sb3_wall_s", "SB3 wall s/run"),
           ("reached", "reached zoo"),
           ("steps", "env steps to it"), ("to_target_s", "s to it"), ("wall_s", "wall s/run"),
           ("pass", "")]


def markdown(rows: list[dict], seeds: list[int], episodes: int) -> str:
    head = "| " + " | ".join(t for _, t in COLUMNS) + " |"
    rule = "|" + "---|" * len(COLUMNS)
    body = ["| " + " | ".join(r[k] for k, _ in COLUMNS) + " |" for r in rows]
    return "\n".join([f"Seeds {', '.join(map(str, seeds))}; final: {episodes} episodes; "
                      f"{time.strftime('%Y-%m-%d')}.", "", head, rule, *body]) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="every task but the long ones")
    ap.add_argument("--long", action="store_true", help="the long tasks")
    ap.add_argument("--tasks", nargs="+", choices=sorted(BY_NAME), default=None)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--markdown", default=None, help="also write the table here")
    ap.add_argument("--set", dest="sets", action="append", default=[],
                    help="a job override for every run (section.key=value), to try a variant")
    ap.add_argument("--final-episodes", type=int, default=100,
                    help="episodes the final policy is evaluated on")
    ap.add_argument("--sb3", action="store_true",
                    help="also SB3 with the zoo's settings on each seed (the bench extra)")
    a = ap.parse_args()
    tasks = [BY_NAME[n] for n in a.tasks] if a.tasks else \
        [t for t in TASKS if (t.long and a.long) or (not t.long and (a.quick or not a.long))]
    rows = []
    for task in tasks:
        if not (ROOT / "configs" / task.job).exists():
            print(f"{task.name}: no configs/{task.job}; skipped", flush=True)
            continue
        runs = []
        for seed in a.seeds:
            r = run_once(task, seed, a.final_episodes, tuple(a.sets))
            if a.sb3 and task.name in SB3:
                r["sb3"], r["sb3_wall_s"] = run_sb3(task, seed, a.final_episodes)
            runs.append(r)
            print(f"{task.name} seed {seed}: final {_fmt(r['final'])} ({a.final_episodes} "
                  f"episodes; last evaluation in training {_fmt(r['last_eval'])}) "
                  f"best.pt {_fmt(r['best_model'])} ({a.final_episodes} episodes) "
                  f"sb3 final {_fmt(r.get('sb3'))} "
                  f"best {_fmt(r['best'])} "
                  f"steps to {task.zoo_return:g} {_fmt(r['steps'], ',')} "
                  f"wall {r['wall_s']:.0f} s exit {r['rc']}", flush=True)
        rows.append(row(task, runs))
        print("  ".join(f"{rows[-1][k]}" for k, _ in COLUMNS), flush=True)
    table = markdown(rows, a.seeds, a.final_episodes)
    print("\n" + table)
    if a.markdown:
        Path(a.markdown).write_text(table)


if __name__ == "__main__":
    main()
