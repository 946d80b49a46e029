"""`verl`: run one role by hand, run a whole job in one process, check a job,
read logs. Heavy modules are imported inside the commands that need them."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from . import blas  # noqa: F401  (before numpy: one BLAS thread per role process)
from .config import ConfigError, Job, load_job, loads_job
from .config.roles import ROLES, default_member_id
from .importing import cwd_importable

JOB_FILE = click.Path(exists=True, dir_okay=False)


def fail(msg: str, code: int = 2) -> None:
    click.echo(f"error: {msg}", err=True)
    sys.exit(code)


def _load(job_path: str, overrides: tuple[str, ...]) -> Job:
    try:
        return load_job(job_path, overrides)
    except ConfigError as e:
        from .ops.checks import config_problem

        fail(config_problem(e))
        raise  # unreachable


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="verl-zmq")
def main() -> None:
    """verl-zmq: asynchronous distributed actor-learner RL over ZeroMQ."""
    cwd_importable()  # a job's own module beside it, as `python -m` would see it


@main.command()
@click.argument("role", type=click.Choice(ROLES))
@click.option("--job", "job_path", required=True, help="Job file, or - to read it from stdin.")
@click.option("--registry", required=True, help="Registry endpoint, tcp://HOST:PORT.")
@click.option("--id", "member_id", default=None, help="Member id (default: ROLE-0).")
@click.option("--group", default="main", show_default=True)
@click.option("--member-index", type=int, default=None,
              help="Take the id and group of the job's N-th member of ROLE (a Kubernetes "
                   "Indexed Job's completion index), instead of --id and --group.")
@click.option("--bind", default="127.0.0.1", show_default=True, help="Address to bind on.")
@click.option("--run-dir", default=None, help="Run folder (checkpoints, snapshots).")
@click.option("--keys", "keys_file", default=None, help="CURVE keys file (mode 600).")
@click.option("--log-file", default=None, help="Write JSON logs here instead of stdout.")
@click.option("--set", "overrides", multiple=True, help="Override a job key: section.key=value.")
@click.option("--exit-on-stdin-eof", is_flag=True, hidden=True,
              help="Stop when stdin closes (the launcher's remote roles).")
@click.option("--standby", is_flag=True, hidden=True,
              help="Import the role's modules, then wait for the job on stdin (a warm spare).")
def role(role, job_path, registry, member_id, group, member_index, bind, run_dir, keys_file,
         log_file, overrides, exit_on_stdin_eof, standby):
    """Run one ROLE of a job by hand (the launcher runs the same code path)."""
    from .comm.transport import CurveKeys

    keys = None
    extra: dict = {}
    try:
        if job_path == "-":
            from .runner import read_stdin_bundle

            if standby:  # the launcher's warm spare: torch imported before it is needed
                extra = _stand_by(role, registry, member_id, run_dir)
            bundle = read_stdin_bundle()
            job = loads_job(bundle["job"], "<stdin>", overrides)
            if bundle.get("keys"):
                keys = CurveKeys(**bundle["keys"])
        else:  # the launcher sends a job whose budget it has counted; by hand, count it
            from .envs.families import with_budget

            job = with_budget(load_job(job_path, overrides))
        if keys_file:
            keys = CurveKeys.load(keys_file)
    except ConfigError as e:
        fail(str(e))
    except (OSError, ValueError, TypeError, PermissionError) as e:
        fail(f"cannot start {role}: {e}")
    if job.security.curve is True and keys is None:
        fail("security.curve is true: pass the job's keys with --keys FILE")
    from .config.members import RoleSpec
    from .runner import run_role_process

    member_id = member_id or default_member_id(role)
    if member_index is not None:
        from .config.members import default_specs

        mine = [s for s in default_specs(job) if s.role == role]
        if not 0 <= member_index < len(mine):
            fail(f"--member-index {member_index}: the job has {len(mine)} {role} member(s)")
        member_id, group = mine[member_index].member_id, mine[member_index].group
    run = Path(run_dir or Path(job.experiment.runs_dir) / job.experiment.name / "by-hand")
    run.mkdir(parents=True, exist_ok=True)
    stream = open(log_file, "a", buffering=1) if log_file else None  # noqa: SIM115
    try:
        rc = run_role_process(job, RoleSpec(role, member_id, group), registry, bind, run, keys,
                              exit_on_stdin_eof, log_stream=stream, extra=extra)
    finally:
        if stream:
            stream.close()
    # the role has stopped, closed its sockets, envs and files: skip the interpreter's
    # teardown, which takes about a second with torch loaded
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)


def _stand_by(role: str, registry: str, member_id: str | None, run_dir: str | None) -> dict:
    """A warm spare's wait for the job (a trainer's spare follows its params
    meanwhile); what the role is handed: the followed params. Exits when let go."""
    from .config.roles import role_traits
    from .follow import Follower
    from .runner import standby as wait_warm

    follower = Follower(registry, member_id, run_dir) \
        if member_id and role_traits(role).trains else None
    if not wait_warm(role, follower):
        sys.exit(0)  # let go unused: the job ended or the launcher is gone
    return {"followed": follower.stop()} if follower is not None else {}


@main.command()
@click.argument("job_path", metavar="JOB", type=JOB_FILE)
@click.option("--set", "overrides", multiple=True, help="Override a job key: section.key=value.")
@click.option("--run-dir", default=None, type=click.Path(file_okay=False),
              help="Run folder (default: runs/<name>/<stamp>).")
@click.option("--no-env-check", "no_env_check", is_flag=True,
              help="Do not reset and step the env before starting (it is still built).")
def run(job_path, overrides, run_dir, no_env_check):
    """Run every role of JOB as tasks in this process over inproc:// (for debugging)."""
    job = _load(job_path, overrides)
    from .ops.checks import job_problem
    from .runner import run_inproc

    if why := job_problem(job, job_path, overrides, probe_steps=0 if no_env_check else None):
        fail(why)
    from .envs.families import with_budget

    job = with_budget(job)
    rd = Path(run_dir) if run_dir else _stamp_dir(job)
    click.echo(f"run folder: {rd}", err=True)
    sys.exit(run_inproc(job, rd))


@main.command()
@click.argument("job_path", metavar="JOB", type=JOB_FILE)
@click.option("--set", "overrides", multiple=True, help="Override a job key: section.key=value.")
@click.option("-o", "--output", "--out", "out", required=True, type=click.Path(),
              help="Checkpoint to write (algorithm.init_from reads it); for a Hugging Face "
                   "model a folder (algorithm.policy.path reads it).")
@click.option("--steps", default=1000, show_default=True, help="Gradient steps at most.")
@click.option("--batch", "batch_prompts", default=64, show_default=True,
              help="Demonstrations per step.")
@click.option("--lr", default=1e-3, show_default=True)
@click.option("--stop-at-accuracy", type=float, default=None,
              help="Stop once greedy exact match on held-out prompts reaches this.")
@click.option("--eval-every", default=50, show_default=True, help="Steps between evaluations.")
@click.option("--response-key", default="reward_model.ground_truth", show_default=True,
              help="A prompt file's column to train on, dotted into a dict (verl's "
                   "response_key + response_dict_keys): extra_info.answer for GSM8K's "
                   "worked solutions.")
@click.option("--response-dict-keys", default="",
              help="verl's spelling: the key inside --response-key's dict.")
@click.option("--lr-scheduler", type=click.Choice(["cosine", "constant"]), default="cosine",
              show_default=True, help="A Hugging Face model's step size after the warmup "
                                      "(verl's optim.lr_scheduler): cosine decays it to 0.")
@click.option("--warmup-ratio", default=0.1, show_default=True,
              help="A Hugging Face model's share of --steps with the step size rising from 0 "
                   "(verl's optim.warmup_steps_ratio).")
@click.option("--clip-grad", default=1.0, show_default=True,
              help="A Hugging Face model's gradient norm clip (verl's optim.clip_grad).")
def sft(job_path, overrides, out, steps, batch_prompts, lr, stop_at_accuracy, eval_every,
        response_key, response_dict_keys, lr_scheduler, warmup_ratio, clip_grad):
    """Warm-start JOB's policy on demonstrations of its sequence task; write --out."""
    import json

    job = _load(job_path, overrides)
    from .seq.sft import run_sft

    extra = {}
    key = f"{response_key}.{response_dict_keys}" if response_dict_keys else response_key
    if job.algorithm.policy.kind == "hf":  # a Hugging Face model: --out is a folder
        from .seq.hf_sft import run_hf_sft as run_sft

        if not 0 <= warmup_ratio < 1 or clip_grad <= 0:
            fail("--warmup-ratio: expected a share in [0, 1), --clip-grad a positive norm")
        extra = {"response_key": key,
                 "warn": lambda m: click.secho(f"warning: {m}", fg="yellow", err=True),
                 "schedule": (lr_scheduler, warmup_ratio, clip_grad)}
    elif key != "reward_model.ground_truth":
        fail("--response-key: read for a Hugging Face model's prompt file alone "
             "(algorithm.policy.kind = \"hf\")")
    try:
        r = run_sft(job, steps, out, batch_prompts, lr, stop_at_accuracy, eval_every,
                    report=lambda row: click.echo(json.dumps(row)), **extra)
    except ValueError as e:
        fail(str(e))
        raise
    click.echo(json.dumps({"written": r.path, "steps": r.steps, "accuracy": r.accuracy,
                           "seconds": round(r.seconds, 1)}))


@main.command("rm-train")
@click.argument("data_path", metavar="DATA", type=click.Path(exists=True, dir_okay=False))
@click.option("-o", "--output", "--out", "out", required=True, type=click.Path(file_okay=False),
              help="The reward model's folder (reward = \"model:FOLDER\" serves it).")
@click.option("--tokenizer", default="chars", show_default=True,
              help="\"chars\" (built in) or a tokenizer folder: the policy's, for a model "
                   "that reads its chat template.")
@click.option("--config", "config", default="",
              help="The model as JSON (model_type and sizes); a 2-layer Llama of width 64 "
                   "by default.")
@click.option("--from", "start", default="", type=click.Path(),
              help="A reward model folder to train further instead.")
@click.option("--steps", default=300, show_default=True)
@click.option("--batch", default=32, show_default=True, help="Pairs or samples per step.")
@click.option("--lr", default=1e-3, show_default=True)
@click.option("--seed", default=0, show_default=True)
def rm_train(data_path, out, tokenizer, config, start, steps, batch, lr, seed):
    """Train a reward model on DATA: preference pairs ({prompt, chosen, rejected}) or
    scored samples ({prompt, response, score}), .jsonl or .parquet; write --out."""
    import json

    from .seq.data import DataError
    from .seq.rm_train import train_reward_model

    try:
        conf = json.loads(config) if config else None
        r = train_reward_model(data_path, out, tokenizer, conf, start, steps, batch, lr, seed)
    except (DataError, ValueError, OSError) as e:
        fail(f"verl rm-train: {e}")
        raise
    click.echo(json.dumps({"written": str(out), "kind": r.kind, "steps": r.steps,
                           "loss": round(r.loss, 4),
                           "accuracy" if r.kind == "pairs" else "correlation": round(r.fit, 4)}))


@main.command()
@click.argument("task", type=click.Choice(["reverse", "add", "calc", "code", "gsm8k"]))
@click.argument("folder", type=click.Path(file_okay=False))
@click.option("--train", "n_train", default=2000, show_default=True, help="Train records.")
@click.option("--val", "n_val", default=100, show_default=True, help="Val records.")
@click.option("--seed", default=0, show_default=True)
@click.option("--format", "fmt", type=click.Choice(["parquet", "jsonl"]), default="parquet",
              show_default=True)
def data(task, folder, n_train, n_val, seed, fmt):
    """Write a toy prompt file pair in verl's columns to FOLDER: reverse 4-6 digits
    (exact match), add two numbers (GSM8K's `#### N`), multiply two numbers of 3-4
    digits with the calculator tool (exact match of the final answer), write a
    function f(x) (its test cases run in the sandbox), or one-step word problems in
    GSM8K's style; all but the first keep a worked solution (a tool call for calc,
    the function for code) in extra_info.answer (verl sft --response-key
    extra_info.answer)."""
    from .seq.toy_prompts import toy_rows, write_prompts

    lengths = {"reverse": (4, 6), "add": (2, 2), "calc": (3, 4), "code": (1, 1),
               "gsm8k": (1, 1)}[task]
    for name, n, s in (("train", n_train, seed), ("val", n_val, seed + 10_000)):
        path = write_prompts(Path(folder) / f"{name}.{fmt}", toy_rows(task, n, s, *lengths))
        click.echo(f"wrote {path} ({n} records)")


def _stamp_dir(job: Job) -> Path:
    import time

    return Path(job.experiment.runs_dir) / job.experiment.name / time.strftime("%Y%m%d-%H%M%S")


@main.command()
@click.argument("job_path", metavar="JOB", type=JOB_FILE)
@click.option("--set", "overrides", multiple=True, help="Override a job key: section.key=value.")
@click.option("--quiet", is_flag=True, help="Print nothing when the job is fine.")
def check(job_path, overrides, quiet):
    """Validate JOB: keys and types, then build its env and networks once."""
    job = _load(job_path, overrides)
    from .ops.checks import job_problem

    if why := job_problem(job, job_path, overrides):
        fail(why)
    if not quiet:
        from .envs.families import with_budget

        s = job.sampling
        counted = with_budget(job)
        budget = ("" if counted is job else f", a budget of "
                  f"{counted.training.total_timesteps:,} env steps from total_epochs")
        click.echo(f"{job_path}: ok ({job.algorithm.name} on {job.environment.id}, "
                   f"{s.num_workers} samplers x {s.num_envs_per_worker} envs{budget})")


@main.command()
@click.argument("run_dir", metavar="RUN_DIR", type=click.Path(exists=True, file_okay=False))
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines as they come.")
@click.option("--role", "roles", multiple=True,
              help="Only these roles or members: a role name (sampler) or a member id "
                   "(sampler-2, launcher); repeatable.")
@click.option("--level", default=None, type=click.Choice(["debug", "info", "warning", "error"]),
              help="Only this level and above.")
@click.option("--event", "events", multiple=True, help="Only these events (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines, not readable ones.")
def logs(run_dir, follow, roles, level, events, as_json):
    """Merge the JSON logs of every role in RUN_DIR by time, and tail them."""
    from .ops.logview import LogFilter, members, show

    known = set(ROLES) | members(Path(run_dir))
    for r in roles:
        if r not in known:
            fail(f"--role {r}: neither a role ({', '.join(ROLES)}) nor a member of this run "
                 f"({', '.join(sorted(known - set(ROLES)))})")

    show(Path(run_dir), LogFilter(roles=set(roles), level=level, events=set(events)),
         follow=follow, as_json=as_json)


def _add_ops() -> None:
    from .ops.cli_ops import COMMANDS

    for cmd in COMMANDS:
        main.add_command(cmd)


_add_ops()

if __name__ == "__main__":
    main()
