"""`verl eval | export | serve | top | plot`: operating a run and its result.
Each command imports what it needs (torch, onnxruntime, rich, matplotlib) itself."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import click


def _fail(msg: str) -> None:
    click.echo(f"error: {msg}", err=True)
    sys.exit(2)


POLICY_HELP = "A multi-agent run's policy (default: the checkpoint's folder's, or the first)."


def _policy(checkpoint: str, policy: str = ""):
    from .export import load_policy

    try:
        return load_policy(checkpoint, policy)
    except Exception as e:  # torch.load alone raises a dozen kinds on a bad file
        _fail(f"{checkpoint}: cannot load a policy from it: {type(e).__name__}: "
              f"{str(e).splitlines()[0][:300] if str(e) else ''}")


@click.command("eval")
@click.argument("checkpoint", type=click.Path(exists=True, dir_okay=False))
@click.option("--episodes", default=10, show_default=True, type=click.IntRange(1, 10_000))
@click.option("--seed", default=None, type=int, help="First episode's seed (default: the job's).")
@click.option("--video", "video_dir", default="", help="Record the first episode here.")
@click.option("--stochastic", is_flag=True, help="Sample actions instead of the mode.")
@click.option("--policy", default="", help=POLICY_HELP)
def eval_cmd(checkpoint, episodes, seed, video_dir, stochastic, policy):
    """Evaluate the policy in CHECKPOINT (step_*.pt, latest.pt or best.pt). Of a
    multi-agent run: its agents acted for by it, the others by the run's other
    trained policies (their best.pt beside it, else latest.pt) and its fixed ones;
    the team's and each policy's return, and games against its references."""
    import torch

    from ..policy.evaluate import evaluate, video_available

    torch.set_num_threads(1)
    lp = _policy(checkpoint, policy)
    if "policy" in lp.meta:
        from .agent_eval import eval_agents

        for line in eval_agents(lp, Path(checkpoint), episodes, seed, not stochastic):
            click.echo(line)
        return
    if video_dir and not video_available():
        _fail("--video needs moviepy: pip install moviepy")
    seed = lp.job.evaluation.seed if seed is None else seed
    rets = evaluate(lp.algo, lp.job, lp.rms, episodes, seed, not stochastic, video_dir)
    meta = ", ".join(f"{k} {v}" for k, v in lp.meta.items())
    click.echo(f"{checkpoint} ({lp.job.algorithm.name} on {lp.job.environment.id}"
               f"{', ' + meta if meta else ''})")
    click.echo(f"episodes {episodes}  mean {rets.mean():.2f}  std {rets.std():.2f}  "
               f"min {rets.min():.2f}  max {rets.max():.2f}")


@click.command("record")
@click.argument("checkpoint", type=click.Path(exists=True, dir_okay=False))
@click.option("--episodes", default=10, show_default=True, type=click.IntRange(1, 100_000))
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--stochastic", is_flag=True, help="Sample actions instead of the mode.")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="The .npz to write.")
def record_cmd(checkpoint, episodes, seed, stochastic, output):
    """Record demonstrations from CHECKPOINT's policy (format: see verl_zmq/demos.py)."""
    import numpy as np
    import torch

    from ..demos import record

    torch.set_num_threads(1)
    lp = _policy(checkpoint)
    arrays = record(lp, episodes, seed, deterministic=not stochastic)
    out = Path(output)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "wb") as f:
        np.savez(f, **arrays)
    rets = np.add.reduceat(arrays["reward"], arrays["episode_start"])
    click.echo(f"wrote {out}: {episodes} episodes, {len(arrays['reward']):,} steps, "
               f"return mean {rets.mean():.1f} (min {rets.min():.1f}, max {rets.max():.1f})")


@click.command("export")
@click.argument("checkpoint", type=click.Path(exists=True, dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["torchscript", "onnx", "hf"]),
              required=True)
@click.option("-o", "--output", required=True, type=click.Path(),
              help="File to write (hf: a folder).")
@click.option("--policy", default="", help=POLICY_HELP)
def export_cmd(checkpoint, fmt, output, policy):
    """Write CHECKPOINT's deterministic policy (obs normalisation included) as one file;
    a Hugging Face policy's as a model folder (--format hf)."""
    import torch

    from .export import export

    torch.set_num_threads(1)
    _policy(checkpoint, policy)  # a clear error before the exporter's own
    try:
        out = export(checkpoint, fmt, output, policy)
    except ImportError as e:
        _fail(f"--format {fmt} needs the {'llm' if fmt == 'hf' else 'onnx'} extra "
              f"(pip install 'verl-zmq[{'llm' if fmt == 'hf' else 'onnx'}]'): {e}")
    except ValueError as e:
        _fail(str(e))
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file()) if out.is_dir() \
        else out.stat().st_size
    click.echo(f"wrote {out} ({fmt}, {size:,} bytes)")


@click.command("serve")
@click.argument("model", type=click.Path(exists=True, dir_okay=False))
@click.option("--bind", default="tcp://127.0.0.1:5600", show_default=True)
@click.option("--report-s", default=10.0, show_default=True,
              help="Seconds between latency reports in the log.")
@click.option("--obs-shape", default=None, help="Refuse other shapes, e.g. 4 or 84,84,3.")
@click.option("--http", "http_port", type=click.IntRange(0, 65535), default=None,
              help="Serve HTTP on this port instead (POST /predict, GET /health, /metrics).")
@click.option("--host", default="127.0.0.1", show_default=True, help="The HTTP address.")
@click.option("--shadow", type=click.Path(exists=True, dir_okay=False), default=None,
              help="HTTP: a second model run on every batch; where it would act otherwise "
                   "is logged (shadow_differs), never answered.")
@click.option("--max-batch", default=64, show_default=True, type=click.IntRange(1, 65536),
              help="HTTP: rows answered by one call of the model.")
@click.option("--batch-wait-ms", default=0.0, show_default=True, type=click.FloatRange(0, 1000),
              help="HTTP: how long a batch may wait for more requests once one is in (0: it "
                   "takes what has arrived meanwhile, no waiting).")
def serve_cmd(model, bind, report_s, obs_shape, http_port, host, shadow, max_batch,
              batch_wait_ms):
    """Answer observation requests with MODEL's actions: msgpack over ZMQ REP, or
    with --http, JSON or msgpack over HTTP with dynamic batching."""
    from ..log import setup_logging
    from .serve import PolicyServer

    log = setup_logging("serve", "serve")
    if http_port is not None:
        try:
            from .serve_http import serve_http
        except ImportError as e:
            _fail(f"--http needs the serve extra (pip install 'verl-zmq[serve]'): {e}")
        try:
            serve_http(model, host, http_port, log, shadow=shadow, max_batch=max_batch,
                       batch_wait_ms=batch_wait_ms)
        except (ValueError, OSError, RuntimeError) as e:
            _fail(f"cannot serve {model} on http://{host}:{http_port}: {e}")
        return
    shape = tuple(int(x) for x in obs_shape.split(",")) if obs_shape else None
    try:
        server = PolicyServer(model, bind, log, shape, report_s)
    except Exception as e:  # an unreadable model or a taken address
        _fail(f"cannot serve {model} on {bind}: {e}")

    def stop(*_):
        server.stopped = True
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    server.serve_forever()


@click.command("top")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--refresh", default=0.5, show_default=True, help="Seconds between redraws.")
@click.option("--once", is_flag=True, help="Print one frame and exit.")
def top_cmd(run_dir, refresh, once):
    """A live view of RUN_DIR: every role, its rates, queues, losses and eval return."""
    try:
        import rich  # noqa: F401
    except ImportError:
        _fail("verl top needs rich (pip install 'verl-zmq[dashboard]')")
    from .top import run_top

    run_top(Path(run_dir), refresh, once)


@click.command("plot")
@click.argument("run_dirs", nargs=-1, required=True,
                type=click.Path(exists=True, file_okay=False))
@click.option("-o", "--output", default=None, type=click.Path(dir_okay=False),
              help="Image to write (default: RUN_DIR/curve.png, or compare.png for several).")
def plot_cmd(run_dirs, output):
    """Eval and training return against env steps and wall time, runs overlaid."""
    try:
        from .plot import plot_runs
    except ImportError as e:
        _fail(f"verl plot needs matplotlib (pip install 'verl-zmq[plot]'): {e}")
    out = plot_runs([Path(d) for d in run_dirs], Path(output) if output else None)
    click.echo(f"wrote {out}")


@click.command("runs")
@click.argument("paths", nargs=-1, type=click.Path(file_okay=False))
@click.option("--compare", is_flag=True, help="PATHS are run folders: compare them.")
def runs_cmd(paths, compare):
    """List the runs under a folder (default runs/): `verl runs [RUNS_DIR]`; or
    compare run folders side by side: `verl runs --compare RUN RUN...`."""
    from .runs import compare as compare_runs
    from .runs import find_runs, table

    if compare:
        folders = [Path(p) for p in paths]
        missing = [str(f) for f in folders if not (f / "plan.json").exists()]
        if len(folders) < 2 or missing:
            _fail("--compare takes two or more run folders"
                  + (f"; not a run folder (no plan.json): {', '.join(missing)}" if missing
                     else ""))
        click.echo(compare_runs([r for f in folders for r in find_runs(f, max_depth=0)]))
        return
    if len(paths) > 1:
        _fail("one RUNS_DIR to list (use --compare for several run folders)")
    root = Path(paths[0] if paths else "runs")
    if not root.is_dir():
        _fail(f"{root}: no such folder")
    runs = find_runs(root)
    click.echo(table(runs, root) if runs else f"no runs under {root}")


@click.command("sweep")
@click.argument("job", type=click.Path(exists=True, dir_okay=False))
@click.argument("space", type=click.Path(exists=True, dir_okay=False))
@click.option("--trials", default=12, show_default=True, type=click.IntRange(1),
              help="Finished trials the study holds at the end (a resumed sweep counts "
                   "its earlier ones).")
@click.option("--parallel", default=1, show_default=True, type=click.IntRange(1),
              help="Trials at once.")
@click.option("--hosts", default="configs/hosts.local.txt", show_default=True,
              help="The hosts file every trial's job runs on.")
@click.option("--out", default=None, help="The study's folder (default: "
              "runs/sweeps/<job name>); the same folder resumes it.")
@click.option("--pruner", type=click.Choice(["median", "halving", "none"]), default="median",
              show_default=True, help="Stops trials whose evaluations fall behind.")
@click.option("--trial-timeout-s", default=3600.0, show_default=True,
              help="A trial still running after this is stopped and recorded as failed.")
@click.option("--seed", default=0, show_default=True, help="The sampler's seed.")
@click.option("--seeds-per-trial", default=1, show_default=True, type=click.IntRange(1),
              help="Job seeds each trial runs in turn (the job's, then +1000, ...): its "
                   "objective is their mean, less the luck of one seed.")
@click.option("--set", "overrides", multiple=True, help="section.key=value for every trial.")
def sweep_cmd(job, space, trials, parallel, hosts, out, pruner, trial_timeout_s, seed,
              seeds_per_trial, overrides):
    """Search SPACE's hyperparameters for JOB with Optuna: each trial a real job."""
    from ..config import ConfigError, load_job
    from .sweep import SweepBusy, SweepRun, run_sweep
    from .sweep_report import report
    from .sweep_space import load_space

    try:
        import optuna  # noqa: F401
    except ImportError as e:
        _fail(f"verl sweep needs the tune extra (pip install 'verl-zmq[tune]'): {e}")
    try:
        sp = load_space(space, job, list(overrides))
        base = load_job(job, list(overrides)).experiment
        name = base.name
    except ConfigError as e:
        _fail(str(e))
    folder = Path(out) if out else Path("runs") / "sweeps" / name
    run = SweepRun(Path(job), hosts, folder, sp, parallel, pruner, trial_timeout_s, seed,
                   seeds_per_trial, base.seed)
    try:
        study = run_sweep(run, trials, say=click.echo)
    except KeyboardInterrupt:
        click.echo(f"stopped: the trials under way were stopped and recorded as failed; run "
                   f"the same command to go on from {folder / 'study.db'}", err=True)
        sys.exit(130)
    except SweepBusy as e:
        _fail(str(e))
    report(study, run, say=click.echo)


COMMANDS = [eval_cmd, record_cmd, export_cmd, serve_cmd, top_cmd, plot_cmd, runs_cmd,
            sweep_cmd]
