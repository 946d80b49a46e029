#!/usr/bin/env python
"""Pipeline throughput against the bare loop, side by side in one run.

(a) bare loop: the same vector env and the same batched policy inference in this
    process, env-steps/s;
(b) pipeline: one sampler role feeding one FIFO shard and a learner that drains
    batches without training (real processes, verl-launch), env-steps/s counted
    by the learner after warm-up; and the ratio (b)/(a).

    python tools/bench/throughput.py [--envs 8 32] [--seconds 20]
    python tools/bench/throughput.py --curve   # the pipeline with CURVE against without
    python tools/bench/throughput.py --env atari   # Breakout, the Atari preset, Nature CNN
    python tools/bench/throughput.py --recurrent   # CartPoleNoVel: LSTM against feed-forward

With `--env atari` it also prints Atari frames per second (4 per env step: the
preset skips frames) and per core: the bare loop runs on one core, the pipeline
on all of this machine's (`os.cpu_count()`). Published per-core figures, measured
on other machines: Sample Factory about 4.8k frames/s per core, EnvPool about
4.2k.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: tools.*
from tools.harness import ROOT, events, launch  # noqa: E402

JOBS = {"cartpole": ROOT / "configs" / "cartpole_ppo.toml",
        "atari": ROOT / "configs" / "breakout_ppo.toml",
        "novel": ROOT / "configs" / "cartpole_novel_lstm.toml"}
FRAME_SKIP = {"cartpole": 1, "atari": 4, "novel": 1}
FEED_FORWARD = 'algorithm.policy.recurrent=""'


def sampler_loop(job_path: Path, envs: int, seconds: float, T: int,
                 extra: list[str]) -> float:
    """A sampler's own stepping code with the policy copy a sampler acts with
    (`make_actor`: numpy for the built-in MLP and recurrent MLP policies), env-steps/s."""
    from verl_zmq.config import load_job
    from verl_zmq.envs.make import env_spec, make_vector_env
    from verl_zmq.policy.numpy_actor import make_actor
    from verl_zmq.sampling.collector import EnvCollector

    job = load_job(job_path, [f"sampling.num_envs_per_worker={envs}",
                              f"sampling.fragment_length={T}",
                              f"replay.capacity={T * envs * 8}", *extra])
    actor = make_actor(job, env_spec(job.environment), (0, 1), (0, 0), threads=1)
    venv, seeds = make_vector_env(job.environment, envs, 0, 1)
    col = EnvCollector(job, actor, venv, seeds)
    col.collect()
    t0, steps = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        col.collect()
        steps += T * envs
    return steps / (time.perf_counter() - t0)


def recurrent_cost(args) -> None:
    """The recurrent CartPoleNoVel job's sampler against the same job feed-forward,
    interleaved: the sampler's stepping code alone, then the pipeline."""
    job = JOBS["novel"]
    print(f"{'envs':>5}{'ff sampler/s':>14}{'lstm sampler/s':>16}{'ratio':>7}"
          f"{'ff pipeline/s':>15}{'lstm pipeline/s':>17}{'ratio':>7}")
    for envs in args.envs:
        ff, rec, pf, pr = [], [], [], []
        for _ in range(args.repeats):
            ff.append(sampler_loop(job, envs, args.seconds / 2, args.fragment_length,
                                   [FEED_FORWARD]))
            rec.append(sampler_loop(job, envs, args.seconds / 2, args.fragment_length, []))
            pf.append(pipeline(job, envs, args.seconds, args.fragment_length,
                               [FEED_FORWARD, *args.extra]))
            pr.append(pipeline(job, envs, args.seconds, args.fragment_length, args.extra))
        m = [statistics.median(x) for x in (ff, rec, pf, pr)]
        print(f"{envs:>5}{m[0]:>14,.0f}{m[1]:>16,.0f}{m[1] / m[0]:>7.2f}"
              f"{m[2]:>15,.0f}{m[3]:>17,.0f}{m[3] / m[2]:>7.2f}", flush=True)


def bare_loop(job_path: Path, envs: int, seconds: float, T: int) -> float:
    import torch

    from verl_zmq.algos import make_algorithm
    from verl_zmq.config import load_job
    from verl_zmq.envs.make import env_spec, make_vector_env
    from verl_zmq.sampling.collector import EnvCollector

    torch.set_num_threads(1)
    job = load_job(job_path, [f"sampling.num_envs_per_worker={envs}",
                              f"sampling.fragment_length={T}", f"replay.capacity={T * envs * 8}"])
    algo = make_algorithm(job, env_spec(job.environment))
    venv, seeds = make_vector_env(job.environment, envs, 0, 1)
    col = EnvCollector(job, algo, venv, seeds)  # the sampler's own stepping code, without I/O
    col.collect()
    t0, steps = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        col.collect()
        steps += T * envs
    return steps / (time.perf_counter() - t0)


def pipeline(job_path: Path, envs: int, seconds: float, T: int, extra: list[str]) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        launch(job_path, run, ["sampling.num_workers=1", f"sampling.num_envs_per_worker={envs}",
                               f"sampling.fragment_length={T}", "sampling.max_fragments_ahead=0",
                               "sampling.lead_updates=0",
                               "training.learn=false", "training.total_timesteps=1000000000",
                               "launch.evaluators=0", "logging.interval_s=1.0",
                               f"replay.capacity={T * envs * 8}", *extra],
               timeout=seconds + 15)
        pts = [(e["ts"], e["learner/env_steps"]) for e in events(run / "logs" / "learner-0.jsonl")
               if e.get("event") == "metrics" and e.get("learner/env_steps", 0) > 0]
    if len(pts) < 4:
        raise RuntimeError("pipeline produced too few metrics")
    pts = pts[2:]  # warm-up
    return (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", choices=sorted(JOBS), default="cartpole")
    ap.add_argument("--envs", type=int, nargs="+", default=None,
                    help="envs per sampler (default: 8 32; atari: 8)")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--fragment-length", type=int, default=None,
                    help="default: 128; atari: 32")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--set", dest="extra", action="append", default=[],
                    help="extra job overrides for the pipeline, e.g. security.curve=true")
    ap.add_argument("--curve", action="store_true",
                    help="compare the pipeline with security.curve=true against without")
    ap.add_argument("--recurrent", action="store_true",
                    help="the recurrent CartPoleNoVel job's sampler against feed-forward")
    args = ap.parse_args()
    job = JOBS[args.env]
    atari = args.env == "atari"
    args.envs = args.envs or ([8] if atari else [8, 32])
    args.fragment_length = args.fragment_length or (32 if atari else 128)
    if args.curve:
        curve_cost(job, args)
        return
    if args.recurrent:
        recurrent_cost(args)
        return
    skip, cores = FRAME_SKIP[args.env], os.cpu_count() or 1
    print(f"{'envs':>5}{'bare steps/s':>15}{'pipeline steps/s':>18}{'ratio':>8}"
          + (f"{'bare frames/s/core':>20}{'pipeline frames/s/core':>24}" if atari else ""))
    for envs in args.envs:
        a, b = [], []
        for _ in range(args.repeats):  # interleaved: the machine is shared and noisy
            a.append(bare_loop(job, envs, args.seconds / 2, args.fragment_length))
            b.append(pipeline(job, envs, args.seconds, args.fragment_length, args.extra))
        ma, mb = statistics.median(a), statistics.median(b)
        print(f"{envs:>5}{ma:>15,.0f}{mb:>18,.0f}{mb / ma:>8.2f}" + (
            f"{ma * skip:>20,.0f}{mb * skip / cores:>24,.0f}" if atari else ""), flush=True)
    if atari:
        print(f"frames/s per core: the bare loop on 1 core, the pipeline on {cores}; "
              f"published (other machines): Sample Factory ~4.8k, EnvPool ~4.2k")


def curve_cost(job: Path, args) -> None:
    """Every socket encrypted and authenticated (CURVE) against plain TCP, interleaved."""
    print(f"{'envs':>5}{'plain steps/s':>15}{'curve steps/s':>15}{'ratio':>8}")
    for envs in args.envs:
        plain, curve = [], []
        for _ in range(args.repeats):
            plain.append(pipeline(job, envs, args.seconds, args.fragment_length,
                                  ["security.curve=false", *args.extra]))
            curve.append(pipeline(job, envs, args.seconds, args.fragment_length,
                                  ["security.curve=true", *args.extra]))
        mp, mc = statistics.median(plain), statistics.median(curve)
        print(f"{envs:>5}{mp:>15,.0f}{mc:>15,.0f}{mc / mp:>8.2f}", flush=True)


if __name__ == "__main__":
    main()
