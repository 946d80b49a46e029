"""`verl check`: what a job file cannot say by its types alone. Builds the env
once and asks the algorithm's traits whether it fits (torch-free: the launcher
runs this before any role starts); `networks=True` (`verl check`) also builds
the algorithm's networks."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from ..config import ConfigError, Job
from ..config.loading import blame_override
from .plugin_checks import plugin_problems

PROBE_HANG_S = 30.0  # an env that has not answered the check's reset or step by then hangs


def config_problem(e: ConfigError) -> str:
    """A job file's error as a user should read it: where `--set algorithm.name`
    moved a job to an algorithm that cannot act in its env, that comes first (the
    params would be the next thing to change)."""
    from ..config.loading import ForeignParams

    if not isinstance(e, ForeignParams) or e.job is None:
        return str(e)
    from ..algos.traits import fit_problem
    from ..config.algorithms import example_job
    from ..envs.make import EnvError, env_spec

    try:
        spec = env_spec(e.job.environment)
    except EnvError:
        return str(e)
    why = fit_problem(e.job, spec.kind, bool(spec.images))
    if not why:
        return str(e)
    head = str(e).split(": algorithm.params:")[0]
    return (f"{head}: {why}; start from a {e.name} job ({example_job(e.name)}) rather than "
            f"{e.owner}'s, whose [algorithm.params] it also holds")


def job_problem(job: Job, source: str, overrides: Sequence[str] = (),
                networks: bool = True, probe_steps: int | None = None) -> str:
    """`check_job`'s problems as one line naming the job file (or the `--set` that
    gave the key), or "" when the job can run."""
    problems = tracking_problems(job) + check_job(job, networks, probe_steps)
    if not problems:
        return ""
    return blame_override(f"{source}: " + " ".join(problems), source, overrides)


def tracking_problems(job: Job) -> list[str]:
    """MLflow and W&B, where `logging.backends` names them, are importable here: the
    launcher (which `verl check` and each launch run on) sends to them."""
    import importlib.util

    return [f"logging.backends: {b!r} needs the {b} package here (pip install -e "
            f"'.[tracking]'), or remove it from the list"
            for b in job.logging.backends
            if b != "tensorboard" and importlib.util.find_spec(b) is None]


def check_job(job: Job, networks: bool = True, probe_steps: int | None = None) -> list[str]:
    """Problems with the job, each one sentence; empty when it can run. The env is
    reset and stepped with random actions (`probe_steps` at most, default
    `contract.PROBE_STEPS`, within `contract.PROBE_S`; 0: not at all): an env
    outside gymnasium's API, or one that raises, is found here."""
    from ..algos.traits import fit_problem
    from ..envs.agents import AgentEnvError, is_multiagent
    from ..envs.make import EnvError, env_spec, make_vector_env, native_vector_env

    try:
        if is_multiagent(job.environment):
            from .agent_checks import agent_job_problems

            return agent_job_problems(job, networks, probe_steps)
        spec = env_spec(job.environment)
    except (EnvError, AgentEnvError) as e:
        return [str(e)]
    why = fit_problem(job, spec.kind, bool(spec.images))
    problems: list[str] = [why] if why else []
    problems += plugin_problems(job)
    if networks and not problems:
        try:
            from ..algos import make_algorithm

            make_algorithm(job, spec)
        except (ValueError, KeyError) as e:
            problems.append(str(e))
    problems += _memory_problems(job, spec)
    if job.algorithm.bc.demos:
        from ..demos import load_demos

        try:
            load_demos(job.algorithm.bc.demos, spec)
        except ValueError as e:
            problems.append(f"algorithm.bc.demos: {e}")
    if problems:
        return problems
    from ..envs.families import source

    if (src := source(job.environment.id)) is not None:  # no env: its files instead
        return src.file_problems(job)
    try:  # a native vector env is one object: make it as samplers will (its groups)
        n = job.sampling.num_envs_per_worker if native_vector_env(job.environment) else 1
        venv, _ = make_vector_env(job.environment, n, seed=job.experiment.seed)
        venv.close()
    except EnvError as e:
        problems.append(str(e))
    if not problems and probe_steps != 0:
        problems += env_problems(job, probe_steps)
    return problems


def env_problems(job: Job, steps: int | None = None) -> list[str]:
    """The env reset and stepped at random as a sampler would (`contract.probe`):
    what it raised, or how an answer broke gymnasium's API, as one sentence. An
    env that may hang or crash (`environment.step_timeout_s` > 0) is left to its
    guarded samplers; any other gets `PROBE_HANG_S` to answer at all."""
    import threading

    from ..envs.contract import PROBE_STEPS, ContractError, probe
    from ..envs.make import EnvError, make_env

    cfg = job.environment
    if cfg.step_timeout_s > 0:
        return []
    try:
        env = make_env(cfg)
    except EnvError as e:
        return [str(e)]
    out: list[str] = []

    def run() -> None:
        try:
            probe(env, job.experiment.seed, PROBE_STEPS if steps is None else steps)
        except ContractError as e:
            out.append(str(e))
        except Exception as e:  # the user's env raised: its own words, and what to do
            out.append(f"environment {cfg.id!r}: {type(e).__name__}: {e} (raised while it "
                       f"was reset and stepped with random actions by the check); fix the "
                       f"env, or if it fails only now and then set environment.step_timeout_s "
                       f"> 0: its envs then run in worker processes and one that fails is "
                       f"made anew (environment.max_env_failures)")
        finally:
            with contextlib.suppress(Exception):
                env.close()

    # a thread: an env that never answers must not hang the check (it stays behind)
    t = threading.Thread(target=run, name="env-check", daemon=True)
    t.start()
    t.join(PROBE_HANG_S)
    if t.is_alive():
        return [f"environment {cfg.id!r}: no answer from reset() or step() within "
                f"{PROBE_HANG_S:.0f} s while the check stepped it; an env that can hang "
                f"needs environment.step_timeout_s > 0 (its envs then run in worker "
                f"processes, and one that hangs is made anew)"]
    return out


def _memory_problems(job: Job, spec) -> list[str]:
    """Refuse jobs whose envs or buffers cannot fit in this machine's memory."""
    import os

    import numpy as np

    try:
        avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return []
    obs_bytes = int(np.prod(spec.obs_shape)) * 4
    per_step = obs_bytes + int(np.prod(spec.action_shape or (1,))) * 4 + 32
    frag = job.sampling.fragment_length * job.sampling.num_envs_per_worker * per_step
    # each sampler holds a fragment being filled plus its send queue; each shard its capacity
    samplers = job.sampling.num_workers * max(1, job.launch.peers)
    need = samplers * frag * 20 + job.launch.replay_shards * job.replay.capacity * per_step * 2
    env_mem = job.sampling.num_workers * job.sampling.num_envs_per_worker * 256 * 1024
    need += env_mem
    if need > avail:
        return [f"the job needs about {need / 2**30:.1f} GiB (sampling.num_workers x "
                f"sampling.num_envs_per_worker envs, fragments and replay.capacity) but this "
                f"machine has {avail / 2**30:.1f} GiB available; lower "
                f"sampling.num_envs_per_worker, sampling.num_workers or replay.capacity"]
    return []
