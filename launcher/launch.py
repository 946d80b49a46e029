"""Launching a whole job, as `verl-launch` and `verl_zmq.train` do: read the job
and hosts (or a run folder to resume), plan, check everything a launch needs
before any role starts, write the run folder, supervise the roles, and report.
Errors a user made are `LaunchError`s with the exit code the command line uses.
Never imports torch or an algorithm."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from verl_zmq.config import ConfigError, Job, dumps_job, load_job, loads_job
from verl_zmq.config.loading import override_keys
from verl_zmq.config.writing import job_to_dict
from verl_zmq.envs.families import with_budget
from verl_zmq.files import clean_temporaries
from verl_zmq.log import errno_name
from verl_zmq.ops.runs import clear_running, flatten, mark_running

from .hosts import HostsError, load_hosts
from .looprun import run_loop
from .plan import Plan, make_plan
from .ports import PortTaken, choose_registry_port, registry_host, release
from .ray_target import is_ray, ray_hosts
from .remote import check_reachable
from .report import Terminal, closing_block, fmt_return, write_summary
from .supervisor import EXIT_BAD_INPUT, EXIT_FAILED, Supervisor


class LaunchError(Exception):
    """A launch that cannot start: the message says why, `code` is the exit code."""

    def __init__(self, message: str, code: int = EXIT_BAD_INPUT):
        super().__init__(message)
        self.code = code


@dataclass
class Launched:
    """What a finished launch leaves: its run folder, summary and exit code."""

    run_dir: Path
    exit_code: int
    summary: dict[str, Any] = field(default_factory=dict)


def run_name(job: Job, overrides: Sequence[str]) -> str:
    """The run's folder under runs/: the experiment's name, and what ran when
    `--set` changed the env or the algorithm (an Acrobot run of the CartPole job
    is filed as `cartpole_ppo+Acrobot-v1`, never among the CartPole runs)."""
    changed = override_keys(overrides)
    if "experiment.name" in changed:
        return job.experiment.name
    extra = [str(v) for k, v in (("environment.id", job.environment.id),
                                 ("algorithm.name", job.algorithm.name)) if k in changed]
    safe = ["".join(c if c.isalnum() or c in "-_." else "_" for c in x) for x in extra]
    return "+".join([job.experiment.name, *safe])


def resumed_job(run_dir: Path, job_path: str | None, overrides: Sequence[str]) -> Job:
    """The job of a run folder being resumed: its saved job with `overrides`; a job
    file given beside it must be that job (only keys named by --set may differ)."""
    saved = run_dir / "job.toml"
    try:
        text = saved.read_text()
    except OSError as e:
        raise LaunchError(f"--resume {run_dir}: cannot read {saved}: {e.strerror or e}") from None
    job = loads_job(text, str(saved), overrides)
    if job_path is None:
        return job
    given = load_job(job_path, overrides)
    changed = override_keys(overrides)
    a, b = flatten(job_to_dict(job)), flatten(job_to_dict(given))
    differ = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k) and k not in changed)
    if differ:
        raise LaunchError(f"--resume {run_dir}: {job_path} is not the job this run was "
                          f"started with ({', '.join(differ[:4])} differ); resume without "
                          f"a job file, or change a key with --set")
    return job


def plan_job(job: Job, hosts_spec: str | None, run_dir: str | None, resume: str | None,
             overrides: Sequence[str]) -> tuple[Path, Plan]:
    """Where the run goes, and its plan: a resumed run keeps the plan it had."""
    if resume:
        rd = Path(resume)
        return rd, Plan.from_json((rd / "plan.json").read_text(), job.registry_port)
    if hosts_spec is None:
        raise LaunchError("no HOSTS given: a hosts file, `local`, `slurm` or `ray`")
    hosts = ray_hosts(hosts_spec) if is_ray(hosts_spec) else load_hosts(hosts_spec)
    plan = make_plan(job, hosts)
    rd = Path(run_dir) if run_dir else (Path(job.experiment.runs_dir) / run_name(job, overrides)
                                        / time.strftime("%Y%m%d-%H%M%S"))
    if (rd / "plan.json").exists():  # its checkpoints would be picked up silently
        raise LaunchError(f"run folder {rd} already holds a run: continue it with "
                          f"--resume {rd}, or choose another --run-dir")
    return rd, plan


# random steps a launch takes in the env before any role starts (`verl check` takes
# more: a launch should not wait long for what the check command is for)
PREFLIGHT_STEPS = 100


def preflight(job: Job, source: str, plan: Plan, overrides: Sequence[str] = (),
              probe_hosts: bool = True, probe_steps: int | None = PREFLIGHT_STEPS) -> None:
    """Everything a launch checks before any role starts, torch-free: the env (its
    id resolves; reset and stepped at random, `probe_steps` at most: None as many
    as `verl check`, 0 none), whether the algorithm fits it, memory,
    demonstrations, and (with `probe_hosts`) that every SSH host answers."""
    from verl_zmq.ops.checks import job_problem

    if why := job_problem(job, source, overrides, networks=False, probe_steps=probe_steps):
        raise LaunchError(why)
    remote = [h for h in plan.hosts if h.by_ssh]
    if not remote or not probe_hosts:
        return

    async def probe() -> list[str]:
        return await asyncio.gather(*(check_reachable(job, h) for h in remote))

    for h, why in zip(remote, run_loop(lambda _signals: probe())):
        if why:
            raise LaunchError(f"host {h.ssh_target} (hosts line {h.line}) is unreachable "
                              f"by SSH: {why}")


def newest_run(job: Job, overrides: Sequence[str]) -> Path | None:
    """The newest run folder of this job (runs_dir/<its run name>/) that started and
    checkpointed: what `resume_mode = "auto"` and `--resume auto` continue."""
    root = Path(job.experiment.runs_dir) / run_name(job, overrides)
    runs = [d for d in root.glob("*") if (d / "plan.json").is_file()
            and (d / "checkpoints" / "latest.pt").is_file()] if root.is_dir() else []
    return max(runs, key=lambda d: (d.stat().st_mtime, d.name)) if runs else None


def auto_resume(job_path: str | None, overrides: Sequence[str], resume: str | None,
                run_dir: str | None) -> str | None:
    """`--resume auto`, or `experiment.resume_mode = "auto"` with neither --resume nor
    --run-dir: the newest run of the job to continue (said on the terminal), or None
    for a new one."""
    if resume not in (None, "auto") or (resume is None and run_dir) or job_path is None:
        return resume
    try:
        job = load_job(job_path, overrides)
    except ConfigError:
        return None if resume == "auto" else resume  # load() reports it
    if resume is None and job.experiment.resume_mode != "auto":
        return None
    found = newest_run(job, overrides)
    said = (f"continuing {found}" if found else
            f"no checkpointed run of this job under {job.experiment.runs_dir}, a new one")
    print(f"resume: {said}", file=sys.stderr)
    return str(found) if found else None


def load(job_path: str | None, hosts_spec: str | None, overrides: Sequence[str],
         run_dir: str | None, resume: str | None, job: Job | None = None
         ) -> tuple[Job, Path, Plan]:
    """The job, its run folder and plan, or a LaunchError naming what is wrong."""
    resume = auto_resume(job_path, overrides, resume, run_dir)
    try:
        if resume:
            if not (Path(resume) / "plan.json").exists():
                raise LaunchError(f"--resume {resume}: no plan.json in that folder (not a "
                                  f"run folder, or a run that never started)")
            job = resumed_job(Path(resume), job_path, overrides)
        elif job is None:
            if job_path is None:
                raise LaunchError("no JOB given: a job file")
            job = load_job(job_path, overrides)
        rd, plan = plan_job(job, hosts_spec, run_dir, resume, overrides)
    except ConfigError as e:
        from verl_zmq.ops.checks import config_problem

        raise LaunchError(config_problem(e)) from None
    except HostsError as e:
        raise LaunchError(str(e)) from None
    return job, rd, plan


def _prepare_run_folder(rd: Path, job_text: str, plan: Plan) -> tuple[Path, IO[str]]:
    """The run folder with the job, the plan and the launcher's log open; a folder
    that cannot be written (a full disk) is a LaunchError, nothing started."""
    try:
        rd.mkdir(parents=True, exist_ok=True)
        rd = rd.resolve()
        clean_temporaries(rd)  # a summary a full disk cut short, last time
        (rd / "job.toml").write_text(job_text)
        plan.write(rd)
        (rd / "logs").mkdir(exist_ok=True)
        return rd, open(rd / "logs" / "launcher.jsonl", "a", buffering=1)  # noqa: SIM115
    except OSError as e:
        raise LaunchError(f"cannot write the run folder {rd}: {e.strerror or e} "
                          f"({errno_name(e)}); nothing was started", EXIT_FAILED) from None


def thread_failed(tb_dir: Path, console: IO[str]) -> Any:
    """A thread hook: TensorBoard's writer thread (the launcher's only one) hitting a
    full disk says so in one line naming its folder, not in a traceback."""
    def hook(args: threading.ExceptHookArgs) -> None:
        if isinstance(args.exc_value, OSError):
            e = args.exc_value
            with contextlib.suppress(OSError):
                console.write(f"error: cannot write {e.filename or tb_dir}: {e.strerror or e} "
                              f"({errno_name(e)}); no more TensorBoard events\n")
            return
        sys.__excepthook__(args.exc_type, args.exc_value, args.exc_traceback)  # type: ignore[arg-type]

    return hook


def place_registry(job: Job, plan: Plan, hold: bool, owner: Path | None = None) -> Any:
    """The plan's registry port: a free one on this machine (`ports.py`); with
    `hold`, the lock keeping it for the job of run folder `owner` (let go with
    `ports.release`)."""
    try:
        port, held = choose_registry_port(job, registry_host(job, plan.hosts, plan.placements),
                                          hold, str(owner.resolve()) if owner else "")
    except PortTaken as e:
        raise LaunchError(str(e)) from None
    plan.registry_port = port
    return held


def run(job: Job, source: str, rd: Path, plan: Plan, verbose: bool = False,
        console: IO[str] = sys.stderr, overrides: Sequence[str] = (),
        callbacks: Sequence[Any] = (), check_env: bool = True) -> Launched:
    """Check, write the run folder, supervise the job to its end and report. A start
    that fails before the job runs leaves no run folder behind (a resumed run's
    folder stays as it was). `check_env` False skips stepping the env first."""
    preflight(job, source, plan, overrides, probe_steps=PREFLIGHT_STEPS if check_env else 0)
    job = with_budget(job)  # a prompt job's total_epochs, counted once for every role
    held = place_registry(job, plan, hold=True, owner=rd)
    fresh = not (rd / "plan.json").exists()
    try:
        rd, stream = _prepare_run_folder(rd, dumps_job(job), plan)
    except BaseException:
        release(held)
        raise
    started = False
    try:
        mark_running(rd, plan.registry_endpoint)
        sup = _supervisor(job, rd, plan, stream, verbose, console, callbacks)
        if not fresh:  # the run's past, from its logs; each trainer then says where it is
            v = sup.view
            sup.term.say(f"resuming: {len(v.evals)} evaluations so far (best "
                         f"{fmt_return(v.best_return)}); each trainer continues from its last "
                         f"checkpoint")
        started = True
        run_loop(sup.run, sup.interrupt)
    except BaseException:
        if not started and fresh:
            with contextlib.suppress(OSError):
                stream.close()
            shutil.rmtree(rd, ignore_errors=True)
        raise
    finally:
        release(held)
        clear_running(rd)
    summary = sup.summary()
    where = write_summary(rd / "summary.json", summary, console)
    sup.tracking.finish(summary)  # its artifacts include summary.json (bounded)
    sup.log.info("launcher_finished", **{k: v for k, v in summary.items() if k != "evaluations"})
    with contextlib.suppress(OSError):
        console.write(closing_block(summary, rd, where))
    if sup.hooks.error is not None:  # a callback's own error, now that the job has stopped
        raise sup.hooks.error
    return Launched(rd, summary["exit_code"], summary)


def _supervisor(job: Job, rd: Path, plan: Plan, stream: IO[str], verbose: bool,
                console: IO[str], callbacks: Sequence[Any]) -> Supervisor:
    """The job's keys, the launcher's log and terminal, and the supervisor."""
    from verl_zmq.comm.transport import CurveKeys, curve_enabled
    from verl_zmq.log import setup_logging

    keys = None
    if curve_enabled(job.security.curve):
        k = CurveKeys.generate()
        keys = {"public": k.public, "secret": k.secret}
        # readable by its owner only: a role started by hand joins with --keys FILE
        k.save(rd / "keys.json")
    term = Terminal(console, verbose)
    log = setup_logging("launcher", "launcher", stream=stream, echo=term.launcher_event)
    if keys is not None:  # the public half only: it names the job's key, it opens nothing
        log.info("curve_enabled", public_key=keys["public"], keys_file="keys.json")
    else:
        why = ("security.curve = false: any process that reaches the job's ports can send "
               "it frames, and a well-formed fragment would be trained on")
        log.warning("curve_disabled", why=why)
        term.say(f"warning: {why}")
    threading.excepthook = thread_failed(rd / "tb", console)
    term.say(f"run folder: {rd} ({job.algorithm.name} on {job.environment.id})")
    return Supervisor(job, plan, rd, dumps_job(job), keys, log, terminal=term,
                      callbacks=callbacks)
