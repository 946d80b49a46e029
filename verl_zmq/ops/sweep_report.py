"""What a sweep says and writes: a line per finished trial, and at the end
`best.toml` (the job with the best trial's values), `trials.csv`, a table of the
trials, and `sweep.png` (the objective by trial with the best so far, and each
parameter's fANOVA importance)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import dumps_job, load_job

if TYPE_CHECKING:
    from .sweep import SweepRun


def trial_line(t: Any) -> str:
    """One finished trial, as the sweep says it."""
    params = ", ".join(f"{k.rsplit('.', 1)[-1]}={_fmt(v)}" for k, v in t.params.items())
    own = ", the job's own values" if t.user_attrs.get("baseline") else ""
    return f"trial {t.number}: {_outcome(t)} ({params}{own})"


def _outcome(t: Any) -> str:
    """A finished trial's objective, or how it ended without one."""
    if t.state.name == "COMPLETE":
        return f"{t.value:,.1f}"
    if t.state.name == "PRUNED":
        return f"pruned after {len(t.intermediate_values)} evaluations"
    why = str(t.user_attrs.get("error", "")).strip().splitlines()
    return f"{t.state.name.lower()}{f': {why[-1][:200]}' if why else ''}"


def _count(v: Any) -> str:
    return f"{v:,.0f}" if isinstance(v, int | float) else ""


def _fmt(v: Any) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def report(study: Any, s: SweepRun, say: Any = print) -> None:
    """best.toml, trials.csv, the table and sweep.png."""
    import optuna

    trials = study.get_trials(deepcopy=False)
    keys = [p.key for p in s.space.params]
    with open(s.out / "trials.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["trial", "state", "value", *keys, "best_return", "env_steps", "wall_s"])
        for t in trials:
            w.writerow([t.number, t.state.name, t.value, *[t.params.get(k) for k in keys],
                        t.user_attrs.get("best_return"), t.user_attrs.get("env_steps"),
                        t.user_attrs.get("wall_s")])
    say("\n| trial | state | objective | " + " | ".join(k.rsplit(".", 1)[-1] for k in keys)
        + " | best return | env steps | s |")
    say("|---" * (7 + len(keys) - 1) + "|")
    for t in trials:
        u = t.user_attrs
        say(f"| {t.number} | {t.state.name.lower()} | "
            f"{f'{t.value:,.0f}' if t.state.name == 'COMPLETE' else ''} | "
            + " | ".join(_fmt(t.params.get(k, '')) for k in keys)
            + f" | {_fmt(u.get('best_return', ''))} | {_count(u.get('env_steps'))} | "
              f"{u.get('wall_s', '')} |")
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    if not complete:
        say("no trial completed: no best job")
        return
    best = study.best_trial
    base = next((t for t in complete if t.user_attrs.get("baseline")), None)
    if base is not None and base.number == best.number:
        say(f"found nothing better than the job's own values (trial {base.number}, "
            f"{s.space.metric} {base.value:,.1f})")
    elif base is not None:
        say(f"the job's own values (trial {base.number}): {s.space.metric} "
            f"{base.value:,.1f}")
    sets = [*s.space.extra, *[f"{k}={json.dumps(v)}" for k, v in best.params.items()]]
    (s.out / "best.toml").write_text(
        f"# verl sweep: trial {best.number} of {len(trials)}, objective {s.space.metric} = "
        f"{best.value:,.1f}\n" + dumps_job(load_job(s.job, sets)))
    say(f"best: trial {best.number}, {s.space.metric} {best.value:,.1f}; job written to "
        f"{s.out / 'best.toml'}")
    try:
        say(f"plot: {plot(study, s)}")
    except ImportError as e:  # matplotlib: the plot extra
        say(f"no plot ({e}); pip install 'verl-zmq[plot]'")


def plot(study: Any, s: SweepRun) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna

    trials = [t for t in study.get_trials(deepcopy=False)
              if t.state == optuna.trial.TrialState.COMPLETE]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2), constrained_layout=True)
    xs, ys = [t.number for t in trials], [t.value for t in trials]
    a1.plot(xs, ys, "o", label="trial")
    best = [min(ys[:i + 1]) if s.space.minimize else max(ys[:i + 1]) for i in range(len(ys))]
    a1.step(xs, best, where="post", label="best so far")
    a1.set_xlabel("trial")
    a1.set_ylabel(s.space.metric)
    a1.legend()
    a1.set_title("objective by trial")
    if len(trials) >= 2:
        imp = optuna.importance.get_param_importances(study)
        a2.barh([k.rsplit(".", 1)[-1] for k in imp][::-1], list(imp.values())[::-1])
        a2.set_xlabel("importance (fANOVA)")
    a2.set_title("parameter importances")
    out = s.out / "sweep.png"
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
