"""`verl sweep JOB SPACE`: hyperparameter search on Optuna, each trial a real job.

Each trial is the job with the trial's values set (`--set`), launched with
`verl-launch` on the sweep's hosts file into its own run folder
(`OUT/trials/trial-NNN`), `--parallel` trials at once, each on a port range of
its own. While a trial runs, its evaluations are reported to Optuna, whose
pruner (median, or successive halving) may stop it early (SIGINT: the job ends
as a stopped job does). The objective is read from the trial's evaluations:

- `steps_to_target` (minimised): env steps at the first evaluation at or above
  the target; a trial that never got there scores its env steps times
  (2 - best / target), so it ranks behind every trial that did, closer ones
  first. Trials run with `evaluation.stop_at_return` = the target.
- `best_return`, `final_return` (maximised).

The study lives in `OUT/study.db` (SQLite): run the same command again, with a
larger `--trials`, to go on where it stopped (a trial cut by the stop is
recorded as failed). A trial whose job fails is recorded as failed with its
error, and the sweep goes on. At the end: `OUT/best.toml` (the job with the best
trial's values), `OUT/trials.csv`, a table on the terminal, and `OUT/sweep.png`
(the objective by trial, the best so far, and each parameter's importance).
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import load_job
from ..config.writing import job_to_dict
from .runs import flatten
from .runview import RunView
from .sweep_report import trial_line
from .sweep_space import Space

POLL_S = 1.0
STOPPING = threading.Event()  # a stop (Ctrl-C) asked: trials stop their jobs and end


class TrialFailed(RuntimeError):
    """A trial's job ended with an error (recorded as a failed trial)."""


@dataclass(frozen=True)
class SweepRun:
    """What a sweep runs: the job, its hosts, where it writes, and its limits."""

    job: Path
    hosts: str
    out: Path
    space: Space
    parallel: int = 1
    pruner: str = "median"
    trial_timeout_s: float = 3600.0
    seed: int = 0  # the sampler's
    seeds: int = 1  # job seeds a trial runs, one after the other (its objective: their mean)
    job_seed: int = 0  # the job's experiment.seed: a trial's seeds are job_seed + 1000 i

    def seed_of(self, i: int) -> int:
        return self.job_seed + 1000 * i


def free_port_range(width: int = 60, low: int = 20000, high: int = 32000) -> tuple[int, int]:
    """A block of free ports in [low, high), below Linux's ephemeral range (so no
    outgoing connection takes one), for a job's `launch.port_range`: each trial's own."""
    for _ in range(200):
        lo = random.randrange(low, high - width)
        try:
            for p in range(lo, lo + 8):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
        except OSError:
            continue
        return lo, lo + width
    raise RuntimeError("no free port range")


def score(evs: list[tuple[int, float, float]], space: Space) -> tuple[float, dict[str, Any]]:
    """The objective of a finished trial's evaluations (its run view's: env steps,
    score, time), and what it came from."""
    if not evs:
        raise TrialFailed("the job ended with no evaluation")
    rets = [r for _, r, _ in evs]
    best, steps = max(rets), evs[-1][0]
    info = {"best_return": best, "final_return": rets[-1], "env_steps": steps}
    if space.metric == "best_return":
        return best, info
    if space.metric == "final_return":
        return rets[-1], info
    assert space.target is not None
    hit = next((n for n, r, _ in evs if r >= space.target), None)
    info["reached"] = hit is not None
    if hit is not None:
        return float(hit), info
    frac = max(0.0, min(best / space.target, 1.0)) if space.target > 0 else 0.0
    return float(max(steps, 1)) * (2.0 - frac), info


def _launch_argv(s: SweepRun, run: Path, sets: list[str]) -> list[str]:
    lo, hi = free_port_range()
    argv = [sys.executable, "-m", "launcher", s.hosts, str(s.job), "--run-dir", str(run),
            "--set", f"launch.port_range=[{lo}, {hi}]"]
    if s.space.metric == "steps_to_target":
        sets = [*sets, f"evaluation.stop_at_return={s.space.target}"]
    for x in [*s.space.extra, *sets]:
        argv += ["--set", x]
    return argv


def objective(s: SweepRun, trial: Any) -> float:
    """Run one trial's job to its end (or its pruning); its objective. A failure's
    reason stays with the trial (`error`)."""
    try:
        return _trial(s, trial)
    except TrialFailed as e:
        if "error" not in trial.user_attrs:
            trial.set_user_attr("error", str(e)[:300])
        raise


def _trial(s: SweepRun, trial: Any) -> float:
    """The trial's job on each of its seeds in turn; the mean of their objectives.
    The first seed's evaluations go to the pruner."""
    if STOPPING.is_set():
        raise TrialFailed("the sweep was stopped")
    values = {p.key: p.suggest(trial) for p in s.space.params}
    sets = [f"{k}={json.dumps(v)}" for k, v in values.items()]
    base = s.out / "trials" / f"trial-{trial.number:03d}"
    base.parent.mkdir(parents=True, exist_ok=True)
    trial.set_user_attr("run_dir", str(base))
    t0 = time.monotonic()
    scores, infos = [], []
    for i in range(s.seeds):
        run = base if s.seeds == 1 else base / f"seed-{i}"
        seed = [f"experiment.seed={s.seed_of(i)}"] if s.seeds > 1 else []
        value, info = _one_run(s, trial, run, [*sets, *seed], prune=i == 0)
        scores.append(value)
        infos.append(info)
    trial.set_user_attr("wall_s", round(time.monotonic() - t0, 1))
    for k in infos[0]:
        vals = [x[k] for x in infos]
        trial.set_user_attr(k, sum(vals) / len(vals) if k != "reached" else all(vals))
    if s.seeds > 1:
        trial.set_user_attr("per_seed", scores)
    return sum(scores) / len(scores)


def _one_run(s: SweepRun, trial: Any, run: Path, sets: list[str], prune: bool
             ) -> tuple[float, dict[str, Any]]:
    import optuna

    log_path = Path(f"{run}.log") if run.name.startswith("seed-") else \
        run.parent / f"{run.name}.log"
    run.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(_launch_argv(s, run, sets), stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    view = RunView(run, keep_train=False)
    seen, pruned = 0, False
    while proc.poll() is None:
        if time.monotonic() - t0 > s.trial_timeout_s:
            _stop(proc)
            raise TrialFailed(f"the job ran past --trial-timeout-s {s.trial_timeout_s:g}")
        if STOPPING.is_set():  # the sweep is stopping: so does this trial's job
            _stop(proc)
            raise TrialFailed("the sweep was stopped")
        view.poll()  # the trial's logs, read on from where they were
        evs = view.evals
        for i in range(seen, len(evs) if prune else seen):
            best = max(r for _, r, _ in evs[:i + 1])
            trial.report(-best if s.space.minimize else best, i)
            if trial.should_prune():
                pruned = True
                break
        seen = len(evs)
        if pruned:
            _stop(proc)
            break
        time.sleep(POLL_S)
    view.poll()
    evs = view.evals
    if pruned:
        trial.set_user_attr("env_steps", evs[-1][0] if evs else 0)
        trial.set_user_attr("wall_s", round(time.monotonic() - t0, 1))
        raise optuna.TrialPruned(f"at evaluation {seen}")
    if proc.returncode != 0:
        tail = log_path.read_text()[-600:]
        trial.set_user_attr("error", tail[-300:])
        raise TrialFailed(f"trial {trial.number}: the job exited {proc.returncode}: "
                          f"{tail.strip().splitlines()[-1] if tail.strip() else ''}")
    return score(evs, s.space)


def _stop(proc: subprocess.Popen[Any], grace_s: float = 60.0) -> None:
    """Stop a trial's job as Ctrl-C would, then wait (bounded) for it."""
    try:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    except ProcessLookupError:
        pass


def study_of(s: SweepRun) -> Any:
    import optuna

    # the sweep says each trial's end itself (failures with their reason, no traceback)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    # median: from the fourth trial, from the third evaluation (early evaluations of a
    # good trial are often as low as a bad one's)
    pruner: Any = {"median": optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=2),
                   "halving": optuna.pruners.SuccessiveHalvingPruner(),
                   "none": optuna.pruners.NopPruner()}[s.pruner]
    s.out.mkdir(parents=True, exist_ok=True)
    study = optuna.create_study(
        study_name="sweep", storage=f"sqlite:///{s.out.resolve() / 'study.db'}",
        load_if_exists=True, direction="minimize" if s.space.minimize else "maximize",
        sampler=optuna.samplers.TPESampler(seed=s.seed), pruner=pruner)
    # a trial left running by a stopped sweep never finishes: record it as failed
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        study.tell(t.number, state=optuna.trial.TrialState.FAIL)
    if not study.get_trials(deepcopy=False):
        values = baseline(s)
        if values is not None:  # the first trial: the job as it is, to beat
            study.enqueue_trial(values, user_attrs={"baseline": True})
    return study


def baseline(s: SweepRun) -> dict[str, Any] | None:
    """The job's own values of the searched keys, where every one lies in its range
    (or among its choices); None otherwise."""
    flat = flatten(job_to_dict(load_job(s.job, s.space.extra)))
    out = {}
    for p in s.space.params:
        v = flat.get(p.key)
        if p.choices:
            if v not in p.choices:
                return None
        elif not isinstance(v, int | float) or not (p.low or 0) <= v <= (p.high or 0):
            return None
        out[p.key] = v
    return out


class SweepBusy(RuntimeError):
    """Another sweep runs on the same study folder."""


def _hold(out: Path) -> Any:
    """An exclusive lock on the study folder for this sweep's life: a second sweep on
    it would take the first one's running trials for stale ones."""
    import fcntl

    out.mkdir(parents=True, exist_ok=True)
    f = open(out / ".sweep.lock", "a+")  # noqa: SIM115 - held until the process ends
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.seek(0)
        raise SweepBusy(f"another sweep runs on {out} (pid {f.read().strip() or '?'}); "
                        f"wait for it, or give this one another --out") from None
    f.seek(0)
    f.truncate()
    f.write(str(os.getpid()))
    f.flush()
    return f


def run_sweep(s: SweepRun, trials: int, say: Any = print) -> Any:
    """Run trials until the study holds `trials` finished ones; the study."""
    import optuna

    lock = _hold(s.out)  # noqa: F841 - held while the sweep runs
    study = study_of(s)
    done = len(study.get_trials(deepcopy=False, states=(
        optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED,
        optuna.trial.TrialState.FAIL)))
    left = max(0, trials - done)
    say(f"sweep: {done} trials in {s.out / 'study.db'}; running {left} more, "
        f"{s.parallel} at a time")
    if left:
        STOPPING.clear()

        def finished(st: Any, t: Any) -> None:
            say(trial_line(t))
            if STOPPING.is_set():
                st.stop()  # no new trial (Optuna takes this from a callback only)

        # Ctrl-C: the trials under way stop their jobs (recorded as failed)
        before = signal.signal(signal.SIGINT, lambda *_: STOPPING.set())
        try:
            waiting = study.get_trials(deepcopy=False,
                                       states=(optuna.trial.TrialState.WAITING,))
            if waiting:  # the enqueued baseline alone: threads sharing the SQLite
                # study could each take the one waiting trial
                study.optimize(lambda t: objective(s, t), n_trials=1, n_jobs=1,
                               catch=(TrialFailed,), callbacks=[finished])
                left -= 1
            if left > 0 and not STOPPING.is_set():
                study.optimize(lambda t: objective(s, t), n_trials=left, n_jobs=s.parallel,
                               catch=(TrialFailed,), callbacks=[finished])
        finally:
            signal.signal(signal.SIGINT, before)
        if STOPPING.is_set():
            raise KeyboardInterrupt
    return study
