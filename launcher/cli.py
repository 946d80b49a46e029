"""`verl-launch HOSTS JOB`: plan roles onto hosts, start and supervise them,
write the run folder, exit 0 done / 1 a role failed for good / 2 bad input /
130 interrupted. Never imports torch or an algorithm."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import click

from verl_zmq.config import ConfigError, dumps_job, load_job
from verl_zmq.files import clean_temporaries
from verl_zmq.log import errno_name

from .hosts import HostsError, load_hosts
from .k8s import k8s_name, manifests, write
from .plan import Plan, make_plan
from .remote import check_reachable, full_argv
from .supervisor import EXIT_BAD_INPUT, EXIT_FAILED, Supervisor, fmt_return


def _bad(msg: str) -> None:
    click.echo(f"error: {msg}", err=True)
    sys.exit(EXIT_BAD_INPUT)


def run_name(job, overrides) -> str:
    """The run's folder under runs/: the experiment's name, and what ran when
    `--set` changed the env or the algorithm (an Acrobot run of the CartPole job
    is filed as `cartpole_ppo+Acrobot-v1`, never among the CartPole runs)."""
    changed = {o.split("=", 1)[0].strip() for o in overrides}
    if "experiment.name" in changed:
        return job.experiment.name
    extra = [str(v) for k, v in (("environment.id", job.environment.id),
                                 ("algorithm.name", job.algorithm.name)) if k in changed]
    safe = ["".join(c if c.isalnum() or c in "-_." else "_" for c in x) for x in extra]
    return "+".join([job.experiment.name, *safe])


def _run_folder(job, plan: Plan, overrides, resume, run_dir) -> tuple[Path, Plan]:
    """Where the run goes, and its plan: a resumed run keeps the plan it had."""
    if resume:
        rd = Path(resume)
        if not (rd / "plan.json").exists():
            _bad(f"--resume {resume}: no plan.json in that folder")
        return rd, Plan.from_json((rd / "plan.json").read_text(), job.registry_port)
    rd = Path(run_dir) if run_dir else (Path(job.experiment.runs_dir) / run_name(job, overrides)
                                        / time.strftime("%Y%m%d-%H%M%S"))
    if (rd / "plan.json").exists():  # its checkpoints would be picked up silently
        _bad(f"run folder {rd} already holds a run: continue it with --resume {rd}, "
             f"or choose another --run-dir")
    return rd, plan


def print_plan(plan: Plan, job, run_dir: Path) -> None:
    rows = [(p.member_id, p.role, p.group, plan.host_of(p).address) for p in plan.placements]
    widths = [max(len(r[i]) for r in rows + [("member", "role", "group", "host")])
              for i in range(4)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    click.echo(fmt.format("member", "role", "group", "host"))
    for r in rows:
        click.echo(fmt.format(*r))
    click.echo(f"\nregistry: {plan.registry_endpoint}\n\ncommands (the job arrives on stdin):")
    for p in plan.placements:
        click.echo(f"  {p.member_id}: {shlex.join(full_argv(job, plan, p, run_dir))}")


def kubernetes(job_path: str, overrides, out_dir: str | None, apply_k8s: bool) -> None:
    """Write the job's manifests (launcher/k8s.py); with --apply, `kubectl apply` them."""
    from verl_zmq.comm.transport import CurveKeys, curve_enabled

    if not out_dir and not apply_k8s:
        _bad("k8s: say where the manifests go (-o DIR), or --apply them")
    try:
        job = load_job(job_path, overrides)
    except ConfigError as e:
        _bad(str(e))
    keys = None
    if curve_enabled(job.security.curve, ["k8s"]):
        k = CurveKeys.generate()
        keys = {"public": k.public, "secret": k.secret}
    out = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix="verl-k8s-"))
    paths = write(manifests(job, keys), out)
    name = k8s_name(job)
    click.echo(f"wrote {len(paths)} manifests to {out} (objects labelled verl-zmq/run={name})",
               err=True)
    if not apply_k8s:
        return
    if shutil.which("kubectl") is None:
        _bad("k8s --apply: kubectl is not on PATH; apply the manifests with -o DIR instead")
    r = subprocess.run(["kubectl", "apply", "-f", str(out)])
    sys.exit(r.returncode)


def write_summary(path: Path, summary: dict) -> str:
    """summary.json; where it cannot be written (a full disk), its content on stdout
    after one line on stderr naming the path and the error. Where it went."""
    text = json.dumps(summary, indent=2)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text)
        tmp.replace(path)
        return str(path)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        click.echo(f"error: cannot write {path}: {e.strerror or e} ({errno_name(e)}); "
                   f"the summary follows on stdout", err=True)
        with contextlib.suppress(OSError):
            click.echo(text)
        return "stdout"


def thread_failed(tb_dir: Path):
    """A thread hook: TensorBoard's writer thread (the launcher's only one) hitting a
    full disk says so in one line naming its folder, not in a traceback; anything
    else as Python would report it."""
    def hook(args) -> None:
        if isinstance(args.exc_value, OSError):
            e = args.exc_value
            with contextlib.suppress(OSError):
                click.echo(f"error: cannot write {e.filename or tb_dir}: {e.strerror or e} "
                           f"({errno_name(e)}); no more TensorBoard events", err=True)
            return
        sys.__excepthook__(args.exc_type, args.exc_value, args.exc_traceback)

    return hook


def _prepare_run_folder(rd: Path, job_text: str, plan: Plan):
    """The run folder with the job, the plan and the launcher's log open; a folder
    that cannot be written (a full disk) is one line and exit 1, nothing started."""
    try:
        rd.mkdir(parents=True, exist_ok=True)
        rd = rd.resolve()
        clean_temporaries(rd)  # a summary a full disk cut short, last time
        (rd / "job.toml").write_text(job_text)
        plan.write(rd)
        (rd / "logs").mkdir(exist_ok=True)
        return rd, open(rd / "logs" / "launcher.jsonl", "a", buffering=1)  # noqa: SIM115
    except OSError as e:
        click.echo(f"error: cannot write the run folder {rd}: {e.strerror or e} "
                   f"({errno_name(e)}); nothing was started", err=True)
        sys.exit(EXIT_FAILED)


def preflight_check(job, job_path: str) -> None:
    """What needs gymnasium to know (the env, whether the algorithm fits it,
    memory, demonstrations), in this process and torch-free: ~0.2 s before any
    role starts, where a `verl check` subprocess importing torch took seconds."""
    from verl_zmq.ops.checks import check_job

    problems = check_job(job, networks=False)
    if problems:
        _bad(f"{job_path}: " + " ".join(problems))


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("hosts_spec", metavar="HOSTS")
@click.argument("job_path", metavar="JOB")
@click.option("--set", "overrides", multiple=True, help="Override a job key: section.key=value.")
@click.option("--dry-run", is_flag=True, help="Print the plan and commands; start nothing.")
@click.option("--resume", "resume", default=None, help="Continue the run in this run folder.")
@click.option("--run-dir", default=None, help="Run folder (default runs/<name>/<stamp>).")
@click.option("-o", "--out", "out_dir", default=None,
              help="k8s: write the manifests into this folder.")
@click.option("--apply", "apply_k8s", is_flag=True,
              help="k8s: hand the manifests to `kubectl apply`.")
def main(hosts_spec, job_path, overrides, dry_run, resume, run_dir, out_dir, apply_k8s):
    """Start a whole job: HOSTS is a hosts file, `local` or `slurm`; JOB a job file.
    HOSTS `k8s` writes the job's Kubernetes manifests instead (-o DIR, --apply)."""
    if hosts_spec == "k8s":
        kubernetes(job_path, overrides, out_dir, apply_k8s)
        return
    try:
        job = load_job(job_path, overrides)
        hosts = load_hosts(hosts_spec)
        plan = make_plan(job, hosts)
    except (ConfigError, HostsError) as e:
        _bad(str(e))
    from verl_zmq.comm.transport import curve_enabled

    rd, plan = _run_folder(job, plan, overrides, resume, run_dir)
    if dry_run:
        print_plan(plan, job, rd.resolve())
        return
    preflight_check(job, job_path)
    remote = [h for h in plan.hosts if h.by_ssh]
    if remote:
        async def probe():
            return await asyncio.gather(*(check_reachable(job, h) for h in remote))

        for h, why in zip(remote, asyncio.run(probe())):
            if why:
                _bad(f"host {h.ssh_target} (hosts line {h.line}) is unreachable by SSH: {why}")
    job_text = dumps_job(job)
    rd, stream = _prepare_run_folder(rd, job_text, plan)
    keys = None
    if curve_enabled(job.security.curve, [h.address for h in plan.hosts]):
        from verl_zmq.comm.transport import CurveKeys

        k = CurveKeys.generate()
        keys = {"public": k.public, "secret": k.secret}
    from verl_zmq.log import setup_logging

    log = setup_logging("launcher", "launcher", stream=stream)
    if keys is not None:  # the public half only: it names the job's key, it opens nothing
        log.info("curve_enabled", public_key=keys["public"])
    threading.excepthook = thread_failed(rd / "tb")
    click.echo(f"run folder: {rd} ({job.algorithm.name} on {job.environment.id})", err=True)
    sup = Supervisor(job, plan, rd, job_text, keys, log)
    rc = asyncio.run(sup.run())
    summary = sup.summary()
    where = write_summary(rd / "summary.json", summary)
    log.info("launcher_finished", **{k: v for k, v in summary.items() if k != "evaluations"})
    click.echo(f"{summary['status']}: env steps {summary['env_steps']:,}, best eval "
               f"{fmt_return(summary['best_eval_return'])}, final eval "
               f"{fmt_return(summary['final_eval_return'])}, wall {summary['wall_s']:.1f}s; "
               f"summary: {where}", err=True)
    for m, err in summary["failed_roles"].items():
        click.echo(f"failed for good: {m}\n{err}", err=True)
    sys.exit(rc)


if __name__ == "__main__":
    main()
