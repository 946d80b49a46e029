#!/usr/bin/env python
"""Multi-agent jobs measured, each a whole job launched with verl-launch on this
machine (the `multiagent` and `bench` extras).

- `spread`: MPE2 simple_spread_v3 (3 agents, PettingZoo's defaults) at one
  budget of agent steps, per seed: ours with one shared PPO policy
  (configs/simple_spread_ppo.toml), ours with a centralised critic (MAPPO:
  `multiagent.centralised_critic`), and Stable-Baselines3's PPO on the same env
  through SuperSuit's parameter-sharing vector env (the common baseline) with the
  same PPO settings. Reports each final policy's mean episode return summed over
  the agents on 100 episodes (ours: the job's final evaluation; SB3: the same
  episodes, deterministic), env steps, and whole-process wall time.
- `peers`: DAPO with a peer per agent (configs/simple_spread_dapo.toml: each of
  the 3 agents has its own policy, learnt by its own peer from its agent's steps
  and those the other peers push, asynchronously; `dapo-rounds`: gradient rounds
  instead) against
  one PPO policy shared by the agents (and, on request, MAPPO), same
  hyperparameters and evaluations: the group's agent steps and seconds until the
  joint policy's evaluation first reaches `--target` (for DAPO: every peer's),
  and the final evaluation.
- `steps`: agent steps per second of acting and stepping alone, one process: our
  sampler's collector against SuperSuit's vector env with SB3's policy acting,
  on the same env copies.
- `connect4`: configs/connect_four_selfplay.toml, then its best.pt against a
  random player and the one-step lookahead (1000 games each, half in each seat;
  the policy's most likely moves, then its moves sampled), illegal moves in
  10,000 moves, and the rating curve of the job's evaluations.
- `tag`: MPE2 simple_tag_v3 with two trained policies (the adversaries, the
  prey: configs/simple_tag_ppo.toml); each final policy against the other's
  early version (its first checkpoint, at 50,000 agent steps) beside the two
  early versions against each other.

    python tools/bench/multiagent.py spread --seeds 0 1 2 --steps 1000000
    python tools/bench/multiagent.py peers --seeds 0 1 2 --target -65
    python tools/bench/multiagent.py steps
    python tools/bench/multiagent.py connect4
    python tools/bench/multiagent.py tag
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: tools.*
from tools.harness import ROOT, events, launch  # noqa: E402

SPREAD = ROOT / "configs" / "simple_spread_ppo.toml"
SPREAD_DAPO = ROOT / "configs" / "simple_spread_dapo.toml"
CONNECT4 = ROOT / "configs" / "connect_four_selfplay.toml"
TAG = ROOT / "configs" / "simple_tag_ppo.toml"
LOOKAHEAD = "verl_zmq.envs.opponents:connect_four_lookahead"


def _final_eval(run: Path) -> dict[str, Any]:
    evs = [e for e in events(run / "logs" / "evaluator-0.jsonl") if e.get("event") == "evaluated"]
    return evs[-1] if evs else {}


def ours_spread(seed: int, steps: int, tmp: Path, mappo: bool, extra: list[str]
                ) -> dict[str, Any]:
    run = tmp / f"ours-{'mappo' if mappo else 'shared'}-{seed}"
    sets = [f"experiment.seed={seed}", f"training.total_timesteps={steps}",
            "evaluation.interval_steps=100000000", "evaluation.before_training=false",
            *extra]
    if mappo:
        sets.append("multiagent.centralised_critic=true")
    rc, wall = launch(SPREAD, run, sets)
    ev = _final_eval(run)
    return {"arm": "ours MAPPO" if mappo else "ours shared", "seed": seed, "rc": rc,
            "return": ev.get("eval/return_mean"), "episodes": ev.get("episodes"),
            "env_steps": ev.get("env_steps"), "wall_s": round(wall, 1)}


def _spread_env() -> Any:
    from mpe2 import simple_spread_v3

    return simple_spread_v3.parallel_env(continuous_actions=False)


def sb3_spread(seed: int, steps: int) -> dict[str, Any]:
    """SB3 PPO through SuperSuit, ours' PPO settings; its final policy on 100 episodes."""
    import supersuit as ss
    import torch
    from stable_baselines3 import PPO

    from verl_zmq.config import load_job

    t0 = time.perf_counter()
    torch.set_num_threads(1)
    torch.manual_seed(seed)  # SuperSuit's vector env takes no seed through SB3
    np.random.seed(seed)
    job = load_job(SPREAD)
    p, s = job.algorithm.params, job.sampling
    copies = s.num_envs_per_worker * s.num_workers
    venv = ss.concat_vec_envs_v1(ss.pettingzoo_env_to_vec_env_v1(_spread_env()), copies,
                                 num_cpus=1, base_class="stable_baselines3")
    n_agents = venv.num_envs // copies
    model = PPO("MlpPolicy", venv, n_steps=max(1, p.batch_size // venv.num_envs),
                batch_size=p.minibatch_size, n_epochs=p.n_epochs,
                learning_rate=lambda f: p.learning_rate * f, gamma=p.gamma,
                gae_lambda=p.gae_lambda, ent_coef=p.ent_coef, vf_coef=p.vf_coef,
                clip_range=p.clip_range, max_grad_norm=p.max_grad_norm,
                policy_kwargs={"net_arch": list(job.algorithm.policy.hidden_sizes),
                               "activation_fn": torch.nn.Tanh}, device="cpu", verbose=0)
    model.learn(total_timesteps=steps)
    wall = time.perf_counter() - t0
    venv.close()
    rets = []
    for ep in range(100):
        env = _spread_env()
        obs, _ = env.reset(seed=1_000_003 + ep)
        total = 0.0
        while env.agents:
            acts = {a: int(model.predict(obs[a], deterministic=True)[0]) for a in env.agents}
            obs, r, _, _, _ = env.step(acts)
            total += sum(r.values())
        rets.append(total)
        env.close()
    return {"arm": "SB3 PPO + SuperSuit", "seed": seed, "rc": 0,
            "return": round(float(np.mean(rets)), 3), "episodes": 100,
            "env_steps": int(model.num_timesteps), "wall_s": round(wall, 1),
            "agents": n_agents}


def spread(a: argparse.Namespace) -> None:
    rows = []
    with tempfile.TemporaryDirectory() as t:
        for seed in a.seeds:
            for arm in a.arms:
                rows.append(sb3_spread(seed, a.steps) if arm == "sb3" else
                            ours_spread(seed, a.steps, Path(t), arm == "mappo", a.set))
                print(json.dumps(rows[-1]), flush=True)
    print(f"\nsimple_spread_v3, {a.steps:,} agent steps, final policy on 100 episodes "
          f"(return summed over the 3 agents)\n")
    print("| arm | seeds | return, mean (each) | wall s, mean (each) |")
    print("|---|---|---|---|")
    for arm in ("ours shared", "ours MAPPO", "SB3 PPO + SuperSuit"):
        mine = [r for r in rows if r["arm"] == arm]
        if not mine:
            continue
        rets = [r["return"] for r in mine if r["return"] is not None]
        walls = [r["wall_s"] for r in mine]
        print(f"| {arm} | {len(mine)} | {np.mean(rets):.2f} "
              f"({', '.join(f'{x:.2f}' for x in rets)}) | {np.mean(walls):.1f} "
              f"({', '.join(f'{x:.0f}' for x in walls)}) |")


def peers(a: argparse.Namespace) -> None:
    """DAPO with a peer per agent against shared-policy PPO on simple_spread."""
    from tools.bench.dapo import reached

    rows = []
    with tempfile.TemporaryDirectory() as t:
        for seed in a.seeds:
            for arm in a.arms:
                run = Path(t) / f"{arm}-{seed}"
                sets = [f"experiment.seed={seed}", f"training.total_timesteps={a.steps}",
                        f"evaluation.interval_steps={a.eval_every}", *a.set]
                if arm == "mappo":
                    sets.append("multiagent.centralised_critic=true")
                if arm == "dapo-rounds":  # the job's asynchronous keys back at defaults
                    sets += ['gossip.mixing="gradients"', "gossip.neighbor_count=2",
                             "gossip.update_interval=5", "gossip.sync_interval=2"]
                dapo = arm.startswith("dapo")
                rc, wall = launch(SPREAD_DAPO if dapo else SPREAD, run, sets)
                got = reached(run, a.target, wall, dapo)
                final = _final_eval(run)
                rows.append({"arm": arm, "seed": seed, "rc": rc, **got,
                             "final": final.get("eval/return_mean")})
                print(json.dumps(rows[-1]), flush=True)
    print(f"\nsimple_spread_v3, {a.steps:,} agent steps; the joint policy's evaluation "
          f"({a.eval_every:,} group agent steps apart) first at or above {a.target} "
          f"(DAPO: every peer's)\n")
    print("| arm | seeds reached | agent steps to target, mean (each) | s to target, mean | "
          "final return, mean | ratio of steps to ppo |")
    print("|---|---|---|---|---|---|")
    def to_target(arm: str) -> list[int]:
        # a seed that never reached it counts at the budget: a lower bound on its steps
        return [r["all_steps"] if r["all_steps"] is not None else a.steps
                for r in rows if r["arm"] == arm]

    base = float(np.mean(to_target("ppo"))) if "ppo" in a.arms else None
    for arm in a.arms:
        mine = [r for r in rows if r["arm"] == arm]
        got = [r for r in mine if r["all_steps"] is not None]
        steps_ = to_target(arm)
        mean = float(np.mean(steps_))
        secs = [r["all_s"] for r in got if r["all_s"] is not None]
        finals = [r["final"] for r in mine if r["final"] is not None]
        print(f"| {arm} | {len(got)}/{len(mine)} | {mean:,.0f} "
              f"({', '.join(f'{x:,}' for x in steps_)}) | "
              f"{np.mean(secs) if secs else float('nan'):.1f} | "
              f"{np.mean(finals) if finals else float('nan'):.2f} | "
              f"{mean / base if base else float('nan'):.2f} |")


def steps(a: argparse.Namespace) -> None:
    """Agent steps per second acting and stepping, one process each side."""
    import supersuit as ss
    import torch
    from stable_baselines3 import PPO

    from verl_zmq.config import load_job
    from verl_zmq.envs.agents import policy_spec
    from verl_zmq.policy.numpy_actor import make_actor
    from verl_zmq.sampling.agents import MultiAgentCollector

    torch.set_num_threads(1)
    job = load_job(SPREAD, [f"sampling.num_envs_per_worker={a.copies}"])
    ma = job.multiagent
    actors = {p: make_actor(job, policy_spec(job.environment, ma, p), (0, 1), (0, 0))
              for p in ma.trained}
    c = MultiAgentCollector(job, actors, 0, 1)
    c.collect_ready()
    t0, before = time.perf_counter(), c.agent_steps
    while time.perf_counter() - t0 < a.seconds:
        c.collect_ready()
    ours = (c.agent_steps - before) / (time.perf_counter() - t0)
    venv = ss.concat_vec_envs_v1(ss.pettingzoo_env_to_vec_env_v1(_spread_env()), a.copies,
                                 num_cpus=1, base_class="stable_baselines3")
    model = PPO("MlpPolicy", venv, device="cpu", policy_kwargs={"net_arch": [64, 64]})
    obs = venv.reset()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < a.seconds:
        act, _ = model.predict(obs)
        obs, _, _, _ = venv.step(act)
        n += venv.num_envs
    sb3 = n / (time.perf_counter() - t0)
    venv.close()
    print(f"simple_spread_v3, {a.copies} env copies ({3 * a.copies} agents), one process, "
          f"acting with a 64x64 MLP and stepping:")
    print("| | agent steps/s |\n|---|---|")
    print(f"| ours (a sampler's collector, numpy policy) | {ours:,.0f} |")
    print(f"| SB3 policy on SuperSuit's vector env | {sb3:,.0f} |")
    print(f"| ratio | {ours / sb3:.2f} |")


def _policy_player(path: Path, job: Any, policy: str) -> Any:
    from verl_zmq.envs.agents import policy_spec
    from verl_zmq.policy.numpy_actor import make_actor
    from verl_zmq.roles.sampler_agents import _checkpoint_policy
    from verl_zmq.sampling.agents_eval import Player

    spec = policy_spec(job.environment, job.multiagent, policy)
    actor = make_actor(job.policy_view(policy), spec, (0, 1), (7, 7))
    actor.load_policy_arrays(_checkpoint_policy(str(path)))
    return Player(actor, spec)


def connect4(a: argparse.Namespace) -> None:
    from verl_zmq.config import load_job
    from verl_zmq.envs.agents import agents_of
    from verl_zmq.sampling.agents_eval import head_to_head, play, raw_player

    with tempfile.TemporaryDirectory() as t:
        run = Path(a.keep) if a.keep else Path(t) / "run"
        rc, wall = launch(CONNECT4, run, [f"experiment.seed={a.seed}", *a.set])
        curve = [(e["env_steps"], e.get("eval/rating"), e.get(f"eval/vs/{LOOKAHEAD}/win"))
                 for e in events(run / "logs" / "evaluator-0.jsonl")
                 if e.get("event") == "evaluated"]
        job = load_job(CONNECT4, [f"experiment.seed={a.seed}", *a.set])
        agents = agents_of(job.environment)
        me = _policy_player(run / "checkpoints" / "best.pt", job, job.multiagent.trained[0])
    print(f"job: rc {rc}, {wall:.0f} s\n\nrating curve (evaluations; win rate against the "
          f"lookahead in its {job.multiagent.games} games):")
    print("| env steps | rating | vs lookahead |\n|---|---|---|")
    for s, r, w in curve:
        print(f"| {s:,} | {r} | {w} |")
    print("\nbest.pt:")
    print("| moves | opponent | games | wins | draws | losses |\n|---|---|---|---|---|---|")
    for det in (True, False):
        for name in ("random", LOOKAHEAD):
            w, d, lo = head_to_head(job.environment, agents, me, raw_player(name, agents, 11),
                                    a.games, 5_000_000, det)
            print(f"| {'most likely' if det else 'sampled'} | {name.split(':')[-1]} | {a.games} "
                  f"| {w / a.games:.3f} | {d / a.games:.3f} | {lo / a.games:.3f} |")
    rnd = raw_player("random", agents, 12)
    names = agents.names
    moves = illegal = games = 0
    while moves < 10_000:  # most likely and sampled moves, 200 games each in turn
        played = play(job.environment, agents, {"me": me, "rnd": rnd},
                      lambda ag, ep: "me" if ag == names[ep % 2] else "rnd", 200,
                      6_000_000 + games, games % 400 == 0)
        moves += played.moves
        illegal += played.illegal
        games += 200
    print(f"\nillegal moves: {illegal} in {moves:,} moves ({games} games, both sides counted)")


def tag(a: argparse.Namespace) -> None:
    from verl_zmq.config import load_job
    from verl_zmq.envs.agents import agents_of
    from verl_zmq.sampling.agents_eval import play

    with tempfile.TemporaryDirectory() as t:
        run = Path(a.keep) if a.keep else Path(t) / "run"
        sets = [f"experiment.seed={a.seed}", *a.set]
        rc, wall = launch(TAG, run, sets)
        job = load_job(TAG, sets)
        ma = job.multiagent
        early, final = {}, {}
        for p in ma.trained:
            steps = sorted((int(f.stem.split("_")[1]), f)
                           for f in (run / "checkpoints" / p).glob("step_*.pt"))
            early[p] = _policy_player(steps[0][1], job, p)
            final[p] = _policy_player(run / "checkpoints" / p / "latest.pt", job, p)
            print(f"{p}: early = {steps[0][1].name}, final = latest.pt")
        agents = agents_of(job.environment)
        mapping = {ag: ma.map_agent(ag) for ag in agents.names}

        def returns(players: dict[str, Any]) -> dict[str, float]:
            played = play(job.environment, agents, players, lambda ag, ep: mapping[ag],
                          a.games, 9_000_000, True)
            return {p: float(np.mean([sum(v for ag, v in r.items() if mapping[ag] == p)
                                      for r in played.returns])) for p in ma.trained}

        base = returns(early)
    print(f"job: rc {rc}, {wall:.0f} s; returns per episode ({a.games} episodes), summed over "
          f"each policy's agents\n")
    print("| matchup | " + " | ".join(ma.trained) + " |\n|---|" + "---|" * len(ma.trained))
    print("| early vs early | " + " | ".join(f"{base[p]:.2f}" for p in ma.trained) + " |")
    for p in ma.trained:
        r = returns({q: final[q] if q == p else early[q] for q in ma.trained})
        print(f"| final {p} vs early others | " + " | ".join(f"{r[q]:.2f}" for q in ma.trained)
              + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    s = sub.add_parser("spread")
    s.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    s.add_argument("--steps", type=int, default=1_000_000)
    s.add_argument("--arms", nargs="+", choices=("shared", "mappo", "sb3"),
                   default=["shared", "mappo", "sb3"])
    s.add_argument("--set", action="append", default=[],
                   help="a job override for our arms (section.key=value)")
    s = sub.add_parser("peers")
    s.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    s.add_argument("--steps", type=int, default=1_000_000)
    s.add_argument("--target", type=float, default=-65.0)
    s.add_argument("--eval-every", type=int, default=50_000)
    s.add_argument("--arms", nargs="+", choices=("ppo", "dapo", "dapo-rounds", "mappo"),
                   default=["ppo", "dapo", "dapo-rounds"])
    s.add_argument("--set", action="append", default=[],
                   help="a job override for every arm (section.key=value)")
    s = sub.add_parser("steps")
    s.add_argument("--copies", type=int, default=16)
    s.add_argument("--seconds", type=float, default=10.0)
    for name in ("connect4", "tag"):
        s = sub.add_parser(name)
        s.add_argument("--seed", type=int, default=0)
        s.add_argument("--games", type=int, default=1000 if name == "connect4" else 200)
        s.add_argument("--set", action="append", default=[])
        s.add_argument("--keep", help="the run folder to write and keep (default: a temporary one)")
    a = ap.parse_args()
    {"spread": spread, "peers": peers, "steps": steps, "connect4": connect4, "tag": tag}[a.what](a)


if __name__ == "__main__":
    main()
