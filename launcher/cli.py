"""`verl-launch HOSTS JOB`: the command line over `launch.py` (plan, check, start
and supervise the roles, report), plus the plan of `--dry-run` and Kubernetes
manifests. Never imports torch or an algorithm."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import click

from verl_zmq.config import ConfigError, load_job
from verl_zmq.version import __version__

from . import launch
from .k8s import k8s_name, manifests, write
from .plan import Plan
from .remote import full_argv
from .supervisor import EXIT_BAD_INPUT


def _bad(msg: str, code: int = EXIT_BAD_INPUT) -> None:
    click.echo(f"error: {msg}", err=True)
    sys.exit(code)


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
    if curve_enabled(job.security.curve):
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


@click.command(context_settings={"help_option_names": ["-h", "--help"]},
               epilog="Exit codes: 0 done; 1 a role failed for good; 2 bad input (nothing "
                      "started); 3 done, but checkpoints were skipped or failed; 130 "
                      "interrupted.")
@click.argument("hosts_spec", metavar="[HOSTS]", required=False)
@click.argument("job_path", metavar="[JOB]", required=False)
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a job key: section.key=value (a TOML value, else a string).")
@click.option("--dry-run", is_flag=True,
              help="Check the job and its env as a launch does and print the plan; start "
                   "nothing and contact no host (a Ray cluster is asked for its nodes).")
@click.option("--resume", "resume", default=None, type=click.Path(file_okay=False),
              help="Continue the run in this run folder (its job and hosts unless given); "
                   "`auto`: the newest checkpointed run of JOB, else a new run.")
@click.option("--run-dir", default=None, type=click.Path(file_okay=False),
              help="Run folder (default runs/<name>/<stamp>).")
@click.option("-o", "--output", "--out", "out_dir", default=None,
              type=click.Path(file_okay=False),
              help="k8s: write the manifests into this folder.")
@click.option("--apply", "apply_k8s", is_flag=True,
              help="k8s: hand the manifests to `kubectl apply`.")
@click.option("--ray", "ray_address", default=None, metavar="ADDRESS",
              help="Run every role as an actor on the Ray cluster at ADDRESS (the same as "
                   "HOSTS `ray:ADDRESS`; HOSTS `ray`: RAY_ADDRESS, else Ray's `auto`).")
@click.option("--no-env-check", "no_env_check", is_flag=True,
              help="Do not reset and step the env before starting (it is still built).")
@click.option("-v", "--verbose", is_flag=True, help="Show the launcher's own events.")
@click.version_option(__version__, "--version", prog_name="verl-launch")
def main(hosts_spec, job_path, overrides, dry_run, resume, run_dir, out_dir, apply_k8s,
         ray_address, no_env_check, verbose):
    """Start a whole job: HOSTS is a hosts file, `local`, `slurm` or `ray` (a Ray
    cluster's nodes); JOB a job file. HOSTS `k8s` writes the job's Kubernetes
    manifests instead (-o DIR, --apply). `verl-launch --resume RUN_DIR` continues
    a run with its own job and hosts."""
    if ray_address is not None:
        if job_path is not None:
            _bad(f"--ray {ray_address} names the hosts: give only the job file, not "
                 f"{hosts_spec!r} too")
        hosts_spec, job_path = f"ray:{ray_address}", hosts_spec
    if hosts_spec == "k8s":
        kubernetes(job_path, overrides, out_dir, apply_k8s)
        return
    if resume and hosts_spec and job_path is None and hosts_spec.endswith(".toml"):
        hosts_spec, job_path = None, hosts_spec  # `--resume RUN JOB`: a job, no hosts
    try:
        job, rd, plan = launch.load(job_path, hosts_spec, overrides, run_dir, resume)
        if dry_run:
            # a plan for hosts one cannot reach yet; the env stepped as `verl check` does
            launch.preflight(job, job_path or str(rd / "job.toml"), plan, overrides,
                             probe_hosts=False, probe_steps=None)
            launch.place_registry(job, plan, hold=False)
            print_plan(plan, job, rd.resolve())
            return
        done = launch.run(job, job_path or str(rd / "job.toml"), rd, plan, verbose=verbose,
                          overrides=overrides, check_env=not no_env_check)
    except launch.LaunchError as e:
        _bad(str(e), e.code)
    sys.exit(done.exit_code)


if __name__ == "__main__":
    main()
