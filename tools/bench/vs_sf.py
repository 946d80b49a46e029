"""Ours against Sample Factory 2.1.1 (APPO), one after the other in one
invocation: whole-process wall time to the same target, read the same way.

The criterion, on both sides: the mean return of the last 100 training episodes
(the samplers' own episodes, actions sampled from the policy) at or above the
target, with a full window of 100. Sample Factory keeps that window itself
(`--stats_avg 100`, its "reward" episode statistic); an `AlgoObserver` in its
runner reads it after every training iteration and stops the run there. Ours
runs the job with `training.stop_at_episode_return`: the learner keeps the same
window of the episodes in the fragments it receives and ends training after the
update at which it is met (its `episode_target_reached` event). Whole process:
from the start of the command to its exit, teardown included.

Settings, chosen to be the same on both sides (ours: the job file as shipped,
its learning rate set to Sample Factory's):
the same number of env processes and envs (4 workers of 2 CartPole envs),
fragments / rollouts of 32 steps, one update every 256 env steps (one 256-sample
minibatch, 20 epochs), lr 1e-3 constant (Sample Factory has no linear schedule:
ours is set to constant too), gamma 0.99, GAE lambda 0.95, entropy 0.01, value
loss 0.5, clip 0.2, gradient norm 0.5, separate 64x64 tanh actor and critic, no
observation or return normalisation, PPO's GAE targets (no V-trace). The
policy-lag limits are each system's own: ours 4 updates, its samplers paced to
the learner; Sample Factory's samplers are not paced, and with its limit at 4
it did not reach 475 in 300k steps (seed 0), so its default (1000) is used.
Ours also runs its evaluator as shipped (work Sample Factory does not do).
Sample Factory lives in a virtual environment of its own (`.venv-sf`, made on
first use: it pins gymnasium 0.29 and numpy 1.26).

    python tools/bench/learning.py ppo-cartpole --vs sample-factory [--seeds 0 1 2]
    python tools/bench/learning.py lunarlander-ppo --vs sample-factory --seeds 0   # long
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: tools.*
from tools.harness import ROOT, events, launch  # noqa: E402

VENV = ROOT / ".venv-sf"
PINS = ["torch==2.13.0", "sample-factory==2.1.1"]

TASKS = {
    "ppo-cartpole": dict(
        env="CartPole-v1", job="configs/cartpole_ppo.toml", target=475.0, budget=300_000,
        ours=["algorithm.params.learning_rate=0.001",
              'algorithm.params.lr_schedule="constant"'],
        sf=dict(num_workers=4, num_envs_per_worker=2, rollout=32, batch_size=256,
                num_batches_per_epoch=1, num_epochs=20, learning_rate=1e-3, gamma=0.99,
                gae_lambda=0.95, exploration_loss_coeff=0.01, value_loss_coeff=0.5,
                ppo_clip_ratio=0.2, max_grad_norm=0.5)),
    # configs/lunarlander_ppo.toml's settings: 4 x 4 envs, 16,384 env steps an update
    # in 64-sample minibatches, 4 epochs, with 64-step rollouts on both sides (Sample
    # Factory takes no rollout longer than its minibatch: every sample came out
    # invalid with 256); ours scales rewards by the running std of discounted
    # returns, Sample Factory normalises its returns (its nearest setting). Its
    # gymnasium (0.29) names the same task LunarLander-v2.
    "lunarlander-ppo": dict(
        env="LunarLander-v3", sf_env="LunarLander-v2", sf_pins=["box2d==2.3.10", "pygame"],
        job="configs/lunarlander_ppo.toml", target=200.0, budget=3_000_000,
        ours=["sampling.fragment_length=64"],
        sf=dict(num_workers=4, num_envs_per_worker=4, rollout=64, batch_size=64,
                num_batches_per_epoch=256, num_epochs=4, learning_rate=3e-4, gamma=0.999,
                gae_lambda=0.98, exploration_loss_coeff=0.01, value_loss_coeff=0.5,
                ppo_clip_ratio=0.2, max_grad_norm=0.5, normalize_returns=True,
                # its policy lag counts SGD steps, 1,024 an update here: its default
                # limit (1000) would mark every sample invalid
                max_policy_lag=100_000)),
}

# Run as a file, not `-c`: Sample Factory spawns its workers, which import this
# module again (as __mp_main__) and must find the env registered at import.
SF_SCRIPT = r"""
import json, os, statistics, sys, time
t_proc = time.time()
import gymnasium as gym
from sample_factory.algo.runners.runner import AlgoObserver
from sample_factory.algo.utils.misc import ExperimentStatus
from sample_factory.cfg.arguments import parse_full_cfg, parse_sf_args
from sample_factory.envs.env_utils import register_env
from sample_factory.train import make_runner


def make_env(name, cfg=None, env_config=None, render_mode=None):
    return gym.make(name, render_mode=render_mode)


register_env(os.environ["SF_BENCH_ENV"], make_env)


class StopAtTarget(AlgoObserver):
    def __init__(self, target):
        self.target, self.hit = target, None

    def on_training_step(self, runner, it):
        window = runner.policy_avg_stats.get("reward", [[]])[0]
        if self.hit is None and len(window) >= 100 and statistics.fmean(window) >= self.target:
            self.hit = {"t": time.time(), "steps": int(sum(runner.env_steps.values())),
                        "mean": float(statistics.fmean(window))}
            runner._stop_training()


if __name__ == "__main__":
    c = json.loads(sys.argv[1])
    argv = [f"--env={c['env']}", "--algo=APPO", "--experiment=bench",
            f"--train_dir={c['dir']}", f"--seed={c['seed']}", "--device=cpu",
            "--use_rnn=False", "--with_vtrace=False", "--encoder_mlp_layers", "64", "64",
            "--nonlinearity=tanh", "--actor_critic_share_weights=False",
            "--normalize_input=False", "--normalize_returns=False", "--reward_scale=1.0",
            "--lr_schedule=constant", "--ppo_clip_value=1000", "--stats_avg=100",
            f"--train_for_env_steps={c['budget']}", "--save_every_sec=100000",
            "--with_wandb=False", *[f"--{k}={v}" for k, v in c["sf"].items()]]
    parser, cfg = parse_sf_args(argv=argv)
    cfg = parse_full_cfg(parser, argv)
    stop = StopAtTarget(c["target"])
    cfg, runner = make_runner(cfg)
    runner.register_observer(stop)
    status = runner.init()
    if status == ExperimentStatus.SUCCESS:
        status = runner.run()
    print(json.dumps({"t_proc": t_proc, "hit": stop.hit, "status": int(status)}))
"""


def ensure_venv(task: dict) -> Path:
    """Sample Factory's own interpreter, made (once) when it is missing, with what
    the task's env needs there."""
    py = VENV / "bin" / "python"
    if not py.exists():
        print(f"making {VENV.name} for Sample Factory ({', '.join(PINS)}) ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", *PINS], check=True)
    env = task.get("sf_env", task["env"])
    if task.get("sf_pins") and subprocess.run(
            [str(py), "-c", f"import gymnasium; gymnasium.make({env!r})"],
            capture_output=True).returncode:
        subprocess.run([str(py), "-m", "pip", "install", "-q", *task["sf_pins"]], check=True)
    return py


def run_sf(py: Path, task: dict, seed: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "sf_side.py"
        script.write_text(SF_SCRIPT)
        env = task.get("sf_env", task["env"])
        payload = json.dumps({**task, "env": env, "seed": seed, "dir": tmp})
        t0 = time.time()
        r = subprocess.run([str(py), str(script), payload], capture_output=True, text=True,
                           cwd=tmp, timeout=5400, env={**os.environ, "SF_BENCH_ENV": env})
        wall = time.time() - t0
    if r.returncode != 0 or not r.stdout.strip():
        raise RuntimeError(r.stderr[-3000:])
    out = json.loads(r.stdout.strip().splitlines()[-1])
    hit = out["hit"] or {}
    return {"wall_s": wall, "steps": hit.get("steps"), "mean": hit.get("mean"),
            "to_target_s": hit["t"] - t0 if hit else None}


def run_ours(task: dict, seed: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        t0 = time.time()
        launch(ROOT / task["job"], run, [
            f"experiment.seed={seed}", f"training.total_timesteps={task['budget']}",
            f"training.stop_at_episode_return={task['target']}", *task["ours"]], timeout=3600)
        wall = time.time() - t0
        hit = [e for p in (run / "logs").glob("learner-*.jsonl") for e in events(p)
               if e.get("event") == "episode_target_reached"][:1]
    h = hit[0] if hit else {}
    return {"wall_s": wall, "steps": h.get("env_steps"), "mean": h.get("episode_return_mean"),
            "to_target_s": h["ts"] - t0 if h else None}


def main(bench: str, seeds: list[int]) -> None:
    task = TASKS[bench]
    py = ensure_venv(task)
    print(f"target: the last 100 training episodes' mean >= {task['target']:g}")
    print(f"{'who':<8}{'seed':>5}{'s to target':>13}{'process s':>11}{'steps':>10}{'mean':>8}")
    walls: dict[str, list[float]] = {"sf": [], "ours": []}
    missed = []
    for seed in seeds:
        got = {"sf": run_sf(py, task, seed), "ours": run_ours(task, seed)}
        for who, r in got.items():
            print(f"{who:<8}{seed:>5}{fmt(r['to_target_s']):>13}{r['wall_s']:>11.1f}"
                  f"{fmt(r['steps'], ','):>10}{fmt(r['mean']):>8}", flush=True)
            walls[who].append(r["wall_s"])
            if r["steps"] is None:
                missed.append(f"{who} seed {seed}")
        print(f"ratio ours/sf, seed {seed}: whole process "
              f"{got['ours']['wall_s'] / got['sf']['wall_s']:.2f}", flush=True)
    m = {k: sum(v) / len(v) for k, v in walls.items()}
    print(f"\nmean whole-process wall: ours {m['ours']:.1f} s, sample factory {m['sf']:.1f} s; "
          f"ratio of means {m['ours'] / m['sf']:.2f}")
    if missed:  # its wall is then the whole budget's: the ratio is a bound, not a time
        print(f"not at the target within {task['budget']:,} env steps: {', '.join(missed)}")


def fmt(x, spec=".1f") -> str:
    return "> budget" if x is None else format(x, spec)
