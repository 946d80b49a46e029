#!/usr/bin/env python
"""Decentralised DAPO against single-learner PPO on CartPole, arms side by side
in one invocation, same seeds; `tools/bench/learning.py dapo-cartpole` runs it.

Arms (all with 4 x 8 envs' worth of samplers and the DAPO job's
hyperparameters; budgets and evaluation intervals stated for the whole group, so
resolutions are equal):
  dapo         the DAPO job as shipped: the group's batch (256) collected by 4 peers
               (64 each), each update's batch pushed to 2 neighbours and trained on
               beside the batches that have arrived, no waiting (mixing = "async",
               share = "experience")
  dapo-fp16, dapo-terngrad, dapo-topk  (on request) the DAPO job with what travels
               compressed (gossip.compression): batches in half precision or 8-bit
               codes, parameters in half precision, as ternary deltas or top-k deltas
  dapo-grads   the same peers pushing every minibatch's gradient to 2 neighbours
               instead, mixed into their next step (share = "gradients")
  dapo-rounds  the same peers in gradient rounds (mixing = "gradients"): every
               minibatch's gradient averaged over all peers, each round waiting
  dapo-alone   (on request) the same peers with mixing off: each learns alone
  ppo          one PPO learner with the global batch (256): the fair baseline
  ppo-x4       (on request) one PPO learner with batch 4 x 256 (what 4 peers each updating
               on 256 of their own steps spend per round)
  dapo-exact   (on request) the shared batch, parameters averaged after every
               update instead of gradients (local SGD with a period of one update)
  dapo-pull    the parameter-pull gossip: each peer updates on 256 of its
               own steps, reward-softmax pulls from 2 neighbours every 4 updates
  dapo-symmetric (on request) the DAPO job with clip_high = clip_low = 0.2 (PPO's
               clip): pooling apart from DAPO's clip-higher change

Printed per run: total env steps (all trainers together) and wall seconds from
the first env step until the first trainer and until every trainer reached the
target; then per arm the mean with a bootstrap 90% interval, and the ratio of
means to `ppo` (or to the arm `--base` names). (Peers that average gradients
hold identical parameters, so "every peer" is also their average's.)

    python tools/bench/dapo.py [--seeds 0 1 2] [--arms dapo dapo-grads dapo-rounds ppo]
    python tools/bench/dapo.py --task pendulum --arms dapo dapo-alone ppo  # to -300
    python tools/bench/dapo.py --arms dapo dapo-topk --base dapo  # compression's cost
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: tools.*
from tools.harness import ROOT, events, launch, sampling_start  # noqa: E402

DAPO_JOB = "configs/cartpole_dapo.toml"
PPO_JOB = "configs/cartpole_ppo.toml"
BUDGET, EVAL = 400_000, 10_000  # the group's env steps; one learner's eval interval
PEERS = 4


def _dapo_params_for_ppo() -> list[str]:
    """The DAPO job's PPO hyperparameters, as overrides of the PPO job."""
    import tomllib

    raw = tomllib.loads((ROOT / DAPO_JOB).read_text())["algorithm"]["params"]
    drop = {"clip_low", "clip_high", "loss_agg", "dynamic_sampling", "dynamic_tolerance",
            "max_fill_batches"}
    return [f"algorithm.params.{k}={json.dumps(v)}" for k, v in raw.items() if k not in drop]


def _ppo(batch: int) -> tuple[str, list[str]]:
    return PPO_JOB, ["sampling.num_workers=4", "sampling.num_envs_per_worker=8",
                     "sampling.fragment_length=32", f"replay.capacity={max(1024, 2 * batch)}",
                     "algorithm.params.clip_range=0.2", 'algorithm.params.clip_schedule="constant"',
                     f"evaluation.interval_steps={EVAL}", f"training.total_timesteps={BUDGET}",
                     *_dapo_params_for_ppo(), f"algorithm.params.batch_size={batch}",
                     f"algorithm.params.minibatch_size={batch}"]


BASE = [f"training.total_timesteps={BUDGET}", f"evaluation.interval_steps={EVAL}"]
PULL = ["gossip.share_batch=false", 'gossip.mixing="reward_softmax"', "gossip.sync_interval=4",
        "gossip.update_interval=4", "gossip.temperature=50.0", "gossip.staleness_updates=20",
        f"training.total_timesteps={BUDGET // PEERS}", f"evaluation.interval_steps={EVAL // PEERS}"]
# the shipped job's asynchronous keys back at their defaults, for the rounds' modes,
# which do not read them (verl check refuses a key its mode does not read)
RESET = ["gossip.update_interval=5"]
ARMS: dict[str, tuple[str, list[str]]] = {
    "dapo": (DAPO_JOB, BASE),
    **{f"dapo-{name}": (DAPO_JOB, [*BASE, f'gossip.compression="{scheme}"'])
       for name, scheme in (("fp16", "fp16"), ("terngrad", "terngrad"),
                            ("topk", "topk_delta"))},
    "dapo-grads": (DAPO_JOB, [*BASE, 'gossip.share="gradients"',
                              "algorithm.params.decoupled_loss=false"]),
    "dapo-alone": (DAPO_JOB, [*BASE, 'gossip.mixing="exact"', *RESET,
                              "gossip.sync_interval=1000000000"]),
    "dapo-rounds": (DAPO_JOB, [*BASE, 'gossip.mixing="gradients"', *RESET,
                               "gossip.sync_interval=10"]),
    "ppo": _ppo(256),
    "ppo-x4": _ppo(1024),
    "dapo-exact": (DAPO_JOB, [*BASE, 'gossip.mixing="exact"', *RESET, "gossip.sync_interval=1"]),
    "dapo-pull": (DAPO_JOB, PULL),
    # DAPO's decoupled clip made symmetric (0.2, PPO's): pooling measured apart from
    # the clip-higher change to the algorithm
    "dapo-symmetric": (DAPO_JOB, [*BASE, "algorithm.params.clip_high=0.2"]),
}
DEFAULT_ARMS = ["dapo", "dapo-grads", "dapo-rounds", "dapo-pull", "ppo"]
# a second task, with continuous actions: the same arms with these overrides on top
# (ppo-x4 and the pull arm keep CartPole's batch arithmetic: not for this task)
TASKS: dict[str, tuple[list[str], float]] = {
    "cartpole": ([], 475.0),
    "pendulum": (['environment.id="Pendulum-v1"', "algorithm.params.gamma=0.9",
                  "algorithm.params.batch_size=2048", "algorithm.params.minibatch_size=256",
                  "algorithm.params.n_epochs=10", "algorithm.params.ent_coef=0.0",
                  "training.total_timesteps=400000", "evaluation.interval_steps=20000"],
                 -300.0),
}


def run_arm(arm: str, seed: int, target: float, task: list[str] = (),
            extra: list[str] = ()) -> dict:
    """Total env steps and seconds from the first env step to the first trainer and
    to every trainer reaching `target` (None: not within the budget). `extra`:
    overrides for the DAPO arms."""
    job, over = ARMS[arm]
    if job == DAPO_JOB:
        over = [*over, *extra]
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        t0 = time.time()
        launch(ROOT / job, run, [*over, *task, f"experiment.seed={seed}",
                                 f"evaluation.stop_at_return={target}"], timeout=3600)
        return reached(run, target, time.time() - t0, peers=arm.startswith("dapo"))


def reached(run: Path, target: float, wall: float, peers: bool) -> dict:
    """From a finished run's logs: total env steps and seconds from the first env step
    to the first trainer and to every trainer reaching `target` (None: never);
    `peers`: a decentralised job, where one trainer alone is not every trainer."""
    evs = [e for e in events(run / "logs" / "evaluator-0.jsonl")
           if e.get("event") == "evaluated"]
    first = sampling_start(run)
    trainers = {e.get("member") for e in evs}
    latest: dict[str, int] = {}
    got: set[str] = set()
    out = {"first_steps": None, "first_s": None, "all_steps": None, "all_s": None,
           "wall_s": wall}
    for e in evs:  # in time order, until every trainer has reached the target
        latest[e["member"]] = int(e["env_steps"])
        if e["eval/return_mean"] < target:
            continue
        got.add(e["member"])
        since = e["ts"] - first if first is not None else None
        if out["first_steps"] is None:
            out["first_steps"], out["first_s"] = sum(latest.values()), since
        if got == trainers and (len(trainers) > 1 or not peers):
            out["all_steps"], out["all_s"] = sum(latest.values()), since
            break
    return out


def boot(xs: list[float], rng: random.Random, n: int = 2000) -> tuple[float, float]:
    """A bootstrap 90% interval of the mean."""
    means = sorted(sum(rng.choice(xs) for _ in xs) / len(xs) for _ in range(n))
    return means[int(0.05 * n)], means[int(0.95 * n)]


def fmt(x, spec=",.0f") -> str:
    return "> budget" if x is None else format(x, spec)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--arms", nargs="+", choices=sorted(ARMS), default=DEFAULT_ARMS)
    ap.add_argument("--task", choices=sorted(TASKS), default="cartpole")
    ap.add_argument("--target", type=float, default=None, help="default: the task's")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                    help="overrides for every DAPO arm (e.g. gossip.neighbor_count=1)")
    ap.add_argument("--base", default="ppo", help="the arm the ratios are to")
    args = ap.parse_args(argv)
    task, default_target = TASKS[args.task]
    args.target = default_target if args.target is None else args.target
    print(f"{'arm':<14}{'seed':>5}{'steps first':>13}{'steps all':>12}{'s first':>9}"
          f"{'s all':>8}{'process s':>11}")
    rows: dict[str, list[dict]] = {a: [] for a in args.arms}
    for seed in args.seeds:
        for arm in args.arms:  # interleaved: a drifting machine load hits every arm alike
            r = run_arm(arm, seed, args.target, task, args.set)
            rows[arm].append(r)
            print(f"{arm:<14}{seed:>5}{fmt(r['first_steps']):>13}{fmt(r['all_steps']):>12}"
                  f"{fmt(r['first_s'], '.1f'):>9}{fmt(r['all_s'], '.1f'):>8}"
                  f"{r['wall_s']:>11.1f}", flush=True)
    rng = random.Random(0)
    print(f"\nmean total env steps until every trainer reached {args.target:g} "
          f"(90% bootstrap interval), ratio of means to {args.base}:")
    base = rows.get(args.base)
    base_mean = (sum(r["all_steps"] for r in base) / len(base)
                 if base and all(r["all_steps"] for r in base) else None)
    for arm, rs in rows.items():
        xs = [r["all_steps"] for r in rs]
        if any(x is None for x in xs):
            print(f"  {arm:<14} a run did not reach the target within {BUDGET:,} steps")
            continue
        m = sum(xs) / len(xs)
        lo, hi = boot(xs, rng)
        ratio = f"{m / base_mean:.2f} ({lo / base_mean:.2f}-{hi / base_mean:.2f})" \
            if base_mean else "-"
        print(f"  {arm:<14} {m:>10,.0f}  [{lo:,.0f}, {hi:,.0f}]  ratio {ratio}")


if __name__ == "__main__":
    main()
