#!/usr/bin/env python
"""The checks of a GPU machine, one per call, each printing one JSON line: what
ran, on what machine, what it measured, and `ok`. tools/gpu_check.sh runs them
all with a time box each; `--cpu` runs the same code at the sizes a 2-core
machine without a GPU allows, so nothing is debugged on the GPU machine.

    python tools/bench/device_checks.py tests [--cpu]
    python tools/bench/device_checks.py cartpole [--cpu]
    python tools/bench/device_checks.py posttrain [--cpu]
    python tools/bench/device_checks.py breakout [--cpu] [--seconds 180]
    python tools/bench/device_checks.py scaling --env waiting [--cpu] [--samplers 1 2 4]

- tests: tests/test_device.py on the GPU (bf16 autocast, pinned batches, a
  checkpoint written on the GPU that loads on the CPU).
- cartpole: configs/cartpole_ppo.toml to 475 with the learner on the GPU, then
  on the CPU of the same machine: the launcher's whole wall time, the learner's
  updates per second.
- posttrain: GRPO on a Llama of about 100M parameters built from a config
  (bf16 autocast), the learner and both samplers generating on the GPU, for a
  fixed number of updates; then the same on the CPU for fewer: generated tokens
  per second, seconds per update, peak GPU memory.
- breakout: configs/breakout_ppo.toml for a fixed time, the learner on the GPU
  and 12 samplers: frames per second, the learner's busy fraction, the GPU's
  utilisation as nvidia-smi samples it.
- scaling: env steps per second with 1..N samplers (learner draining without
  training, unpaced), beside SB3's SubprocVecEnv on the same envs with random
  actions: verl/Waiting-v0 (5 ms a step), CartPole-v1, LunarLander-v3.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: tools.*
from tools.harness import ROOT, events, launch, start, stop, time_to_return  # noqa: E402

CONFIGS = ROOT / "configs"
# about 100M parameters with the character tokenizer's small vocabulary
LLAMA_100M = ("{model_type=\"llama\", hidden_size=768, intermediate_size=3072, "
              "num_hidden_layers=12, num_attention_heads=12, num_key_value_heads=4, "
              "max_position_embeddings=64}")
LLAMA_TINY = ("{model_type=\"llama\", hidden_size=64, intermediate_size=128, num_hidden_layers=2, "
              "num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64}")
ENVS = {"waiting": ["environment.id=verl/Waiting-v0",
                    "environment.kwargs={latency_ms=5.0, length=200}",
                    "environment.vectorization=threads"],
        "cartpole": ["environment.id=CartPole-v1"],
        "lunarlander": ["environment.id=LunarLander-v3"]}
ENVS_PER_SAMPLER = 4


def machine() -> dict[str, Any]:
    """The machine a line was measured on."""
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"host_cores": os.cpu_count(), "gpu": gpu, "torch": torch.__version__,
            "python": platform.python_version()}


def metrics(run: Path, member: str) -> list[dict[str, Any]]:
    return [e for e in events(run / "logs" / f"{member}.jsonl") if e.get("event") == "metrics"]


def members(run: Path, role: str) -> list[str]:
    return sorted(p.stem for p in (run / "logs").glob(f"{role}-*.jsonl"))


def rate(points: list[tuple[float, float]], skip: float = 1 / 3) -> float | None:
    """Growth per second of a counter over (ts, value) points, after warm-up."""
    pts = points[int(len(points) * skip):]
    if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
        return None
    return (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])


def _gpu_sets(device: str) -> list[str]:
    return [f'training.device="{device}"',
            f"resources.learner.gpu={1 if device.startswith('cuda') else 0}"]


# -- checks ---------------------------------------------------------------------------

def tests(a: argparse.Namespace) -> dict[str, Any]:
    dev = "cpu" if a.cpu else "cuda"
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "tests/test_device.py"], cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, "VERL_TEST_DEVICE": dev}, timeout=a.box)
    tail = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else p.stderr[-300:]
    passed = int(m.group(1)) if (m := re.search(r"(\d+) passed", tail)) else 0
    failed = int(m.group(1)) if (m := re.search(r"(\d+) failed", tail)) else 0
    out = {"device": dev, "passed": passed, "failed": failed, "summary": tail,
           "ok": p.returncode == 0}
    if p.returncode:
        out["error"] = p.stdout[-2000:]
    return out


def cartpole(a: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for dev in (["cpu"] if a.cpu else ["cuda", "cpu"]):
        with tempfile.TemporaryDirectory() as tmp:
            run = Path(tmp) / "run"
            rc, wall = launch(CONFIGS / "cartpole_ppo.toml", run,
                              [*_gpu_sets(dev), "evaluation.stop_at_return=475",
                               "logging.interval_s=1.0"], timeout=a.box / 2 - 10)
            ts, steps = time_to_return(run, 475)
            ev = events(run / "logs" / "learner-0.jsonl")
            first = next((e["ts"] for e in ev if e.get("event") == "first_update"), None)
            last = metrics(run, "learner-0")
            ups = None
            if first is not None and last and last[-1]["ts"] > first:
                ups = (last[-1]["learner/updates"] - 1) / (last[-1]["ts"] - first)
            out[dev] = {"rc": rc, "wall_s": round(wall, 1), "reached_475": ts is not None,
                        "env_steps_at_475": steps,
                        "updates_per_s": round(ups, 2) if ups else None}
    if not a.cpu and out["cpu"]["updates_per_s"] and out["cuda"]["updates_per_s"]:
        out["updates_per_s_gpu_over_cpu"] = round(
            out["cuda"]["updates_per_s"] / out["cpu"]["updates_per_s"], 2)
        out["wall_gpu_over_cpu"] = round(out["cuda"]["wall_s"] / out["cpu"]["wall_s"], 2)
    out["ok"] = all(v["rc"] == 0 and v["reached_475"] for v in out.values() if isinstance(v, dict))
    return out


def _posttrain_run(tmp: Path, device: str, config: str, updates: int, amp: str,
                   timeout: float) -> dict[str, Any]:
    """One GRPO job; on the CPU the learner has half the cores, each sampler a quarter."""
    threads = max(1, (os.cpu_count() or 2) // 2)
    data = tmp / "data"
    if not (data / "train.parquet").exists():
        subprocess.run([sys.executable, "-m", "verl_zmq.cli", "data", "reverse", str(data)],
                       cwd=ROOT, check=True, capture_output=True)
    run = tmp / f"run-{device}"
    batch = 1024  # token slots an update (the job's batch_size)
    sets = [*_gpu_sets(device), f'sampling.device="{device}"', f'training.amp="{amp}"',
            f"algorithm.policy.config={config}", "launch.evaluators=0",
            f'environment.kwargs.train_files="{data / "train.parquet"}"',
            f'environment.kwargs.val_files="{data / "val.parquet"}"',
            f"training.total_timesteps={batch * updates}", "logging.interval_s=1.0",
            "checkpoint.interval_steps=100000000", "checkpoint.snapshot_interval_s=0",
            f"training.torch_threads={threads}", f"sampling.torch_threads={threads // 2 or 1}"]
    rc, wall = launch(CONFIGS / "reverse_hf_grpo.toml", run, sets, timeout=timeout)
    learner = metrics(run, "learner-0")
    samplers = [metrics(run, m) for m in members(run, "sampler")]
    last = learner[-1] if learner else {}
    n_up = int(last.get("learner/updates", 0))
    tok = [m[-1].get("sampler/tokens_per_s") for m in samplers if m]
    peaks = [last.get("learner/gpu_mem_peak_mb")] + \
        [m[-1].get("sampler/gpu_mem_peak_mb") for m in samplers if m]
    return {"device": device, "amp": amp, "rc": rc, "wall_s": round(wall, 1), "updates": n_up,
            "s_per_update": round(last["learner/learn_s"] / n_up, 3) if n_up else None,
            "tokens_per_s_per_sampler": [t for t in tok if t is not None],
            "tokens_per_s_total": round(sum(t for t in tok if t), 1),
            "peak_gpu_mb_learner": peaks[0],
            "peak_gpu_mb_samplers": [p for p in peaks[1:] if p is not None]}


def posttrain(a: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        if a.cpu:  # the code path at the size this machine allows
            out["cpu"] = _posttrain_run(tmp, "cpu", LLAMA_TINY, 2, "bf16", a.box - 10)
        else:
            out["cuda"] = _posttrain_run(tmp, "cuda", LLAMA_100M, 8, "bf16", a.box * 0.5)
            out["cpu"] = _posttrain_run(tmp, "cpu", LLAMA_100M, 2, "bf16", a.box * 0.45)
            g, c = out["cuda"], out["cpu"]
            if g["s_per_update"] and c["s_per_update"]:
                out["update_cpu_over_gpu"] = round(c["s_per_update"] / g["s_per_update"], 1)
            if g["tokens_per_s_total"] and c["tokens_per_s_total"]:
                out["tokens_gpu_over_cpu"] = round(
                    g["tokens_per_s_total"] / c["tokens_per_s_total"], 1)
    cfg = LLAMA_TINY if a.cpu else LLAMA_100M
    out["parameters_m"] = round(_llama_params(cfg) / 1e6, 1)
    out["ok"] = all(v["rc"] == 0 and v["updates"] > 0
                    for v in out.values() if isinstance(v, dict))
    return out


def _llama_params(config: str) -> int:
    """The model's parameter count, built on the meta device (no memory)."""
    import tomllib

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from verl_zmq.seq.hf import char_tokenizer

    cfg = tomllib.loads(f"c = {config}")["c"]
    tok = char_tokenizer()
    conf = AutoConfig.for_model(cfg.pop("model_type"), vocab_size=len(tok), **cfg)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(conf)
    return sum(p.numel() for p in model.parameters())


class GpuWatch:
    """nvidia-smi's utilisation and memory once a second, in a thread."""

    def __init__(self) -> None:
        self.util: list[float] = []
        self.mem: list[float] = []
        self.proc: subprocess.Popen[str] | None = None
        try:
            self.proc = subprocess.Popen(
                ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used",
                 "--format=csv,noheader,nounits", "-lms", "1000"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            return
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                u, m = (float(x) for x in line.split(","))
            except ValueError:
                continue
            self.util.append(u)
            self.mem.append(m)

    def close(self) -> dict[str, Any]:
        if self.proc is not None:
            self.proc.terminate()
        if not self.util:
            return {"gpu_util_mean": None}
        tail = self.util[len(self.util) // 3:]  # after warm-up
        return {"gpu_util_mean": round(sum(tail) / len(tail), 1), "gpu_util_max": max(tail),
                "gpu_mem_used_mb_max": max(self.mem)}


def breakout(a: argparse.Namespace) -> dict[str, Any]:
    dev = "cpu" if a.cpu else "cuda"
    samplers = 2 if a.cpu else 12
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        watch = GpuWatch()
        p = start(CONFIGS / "breakout_ppo.toml", run,
                  [*_gpu_sets(dev), f"sampling.num_workers={samplers}", "launch.evaluators=0",
                   "logging.interval_s=2.0", "checkpoint.snapshot_interval_s=0"])
        time.sleep(a.seconds)
        stop(p)
        gpu = watch.close()
        m = metrics(run, "learner-0")
    pts = [(e["ts"], e["learner/env_steps"]) for e in m if e.get("learner/env_steps", 0) > 0]
    busy = [(e["ts"], e.get("learner/learn_s", 0.0)) for e in m if e.get("learner/updates", 0)]
    steps_s = rate(pts)
    return {"device": dev, "samplers": samplers, "seconds": a.seconds,
            "env_steps": pts[-1][1] if pts else 0,
            "frames_per_s": round(4 * steps_s, 1) if steps_s else None,  # frame skip 4
            "learner_busy": round(b, 3) if (b := rate(busy)) is not None else None,
            "updates": m[-1].get("learner/updates") if m else 0, **gpu,
            "ok": bool(steps_s)}


def _ours(env: str, n: int, seconds: float) -> float | None:
    sets = [*ENVS[env], "environment.normalize_obs=false",
            f"sampling.num_envs_per_worker={ENVS_PER_SAMPLER}", f"sampling.num_workers={n}",
            "launch.evaluators=0", "logging.interval_s=1.0",
            "training.total_timesteps=1000000000", "training.learn=false",
            "sampling.max_fragments_ahead=0", "sampling.lead_updates=0",
            "replay.capacity=65536"]
    if env == "lunarlander":
        sets.append("sampling.fragment_length=64")
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        p = start(CONFIGS / "cartpole_ppo.toml", run, sets)
        # from the learner's first counted steps, `seconds` more
        deadline = time.monotonic() + 60 + n
        while time.monotonic() < deadline and not any(
                e.get("learner/env_steps", 0) > 0 for e in metrics(run, "learner-0")):
            time.sleep(0.5)
        time.sleep(seconds)
        stop(p)
        pts = [(e["ts"], e["learner/env_steps"]) for e in metrics(run, "learner-0")
               if e.get("learner/env_steps", 0) > 0]
    return rate(pts, skip=0.2)


def _sb3(env: str, n_envs: int, seconds: float) -> float | None:
    import gymnasium as gym
    import numpy as np
    from stable_baselines3.common.vec_env import SubprocVecEnv

    def make() -> gym.Env:
        import verl_zmq.envs.tasks  # noqa: F401  (registers verl/Waiting-v0 in the worker)

        if env == "waiting":
            return gym.make("verl/Waiting-v0", latency_ms=5.0, length=200)
        return gym.make("CartPole-v1" if env == "cartpole" else "LunarLander-v3")

    venv = SubprocVecEnv([make for _ in range(n_envs)])
    try:
        venv.reset()
        rng = np.random.default_rng(0)
        acts = 2 if env != "lunarlander" else 4
        for _ in range(5):
            venv.step(rng.integers(0, acts, n_envs))
        t0, steps = time.perf_counter(), 0
        while time.perf_counter() - t0 < seconds:
            venv.step(rng.integers(0, acts, n_envs))
            steps += n_envs
        return steps / (time.perf_counter() - t0)
    finally:
        venv.close()


def scaling(a: argparse.Namespace) -> dict[str, Any]:
    rows = []
    base = None
    deadline = time.monotonic() + a.box - 5
    for n in a.samplers:
        if time.monotonic() > deadline - (a.seconds + 15):
            rows.append({"samplers": n, "skipped": "time box"})
            continue
        ours = _ours(a.env, n, a.seconds)
        sb3 = _sb3(a.env, n * ENVS_PER_SAMPLER, a.seconds / 2) if n * ENVS_PER_SAMPLER <= 256 \
            else None
        base = base or ours
        rows.append({"samplers": n, "envs": n * ENVS_PER_SAMPLER,
                     "ours_steps_per_s": round(ours, 1) if ours else None,
                     "ours_x_one_sampler": round(ours / base, 2) if ours and base else None,
                     "sb3_subproc_steps_per_s": round(sb3, 1) if sb3 else None})
    return {"env": a.env, "envs_per_sampler": ENVS_PER_SAMPLER, "rows": rows,
            "ok": any(r.get("ours_steps_per_s") for r in rows)}


CHECKS = {"tests": tests, "cartpole": cartpole, "posttrain": posttrain, "breakout": breakout,
          "scaling": scaling}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("check", choices=list(CHECKS))
    ap.add_argument("--cpu", action="store_true", help="the sizes of a machine without a GPU")
    ap.add_argument("--box", type=float, default=300.0, help="this check's time box, seconds")
    ap.add_argument("--seconds", type=float, default=180.0, help="breakout: run time; "
                    "scaling: measured seconds a point")
    ap.add_argument("--env", choices=list(ENVS), default="waiting")
    ap.add_argument("--samplers", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64])
    a = ap.parse_args()
    t0 = time.monotonic()
    line: dict[str, Any] = {"check": a.check if a.check != "scaling" else f"scaling-{a.env}",
                            "cpu_mode": a.cpu, "machine": machine()}
    try:
        line.update(CHECKS[a.check](a))
    except Exception as e:  # reported as a failed check, with its error
        line.update(ok=False, error=f"{type(e).__name__}: {e}")
    line["check_s"] = round(time.monotonic() - t0, 1)
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
