"""`verl plot`: eval and training return against env steps and wall time for one
or several runs, overlaid (matplotlib, the `plot` extra)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display needed on a cluster node
import matplotlib.pyplot as plt  # noqa: E402

from .runview import RunView  # noqa: E402


def _about(rd: Path) -> tuple[str, str, str]:
    """(env id, algorithm, run name) from a run folder's job.toml and path."""
    import tomllib

    try:
        job = tomllib.loads((rd / "job.toml").read_text())
        env, algo = job["environment"]["id"], job["algorithm"]["name"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        env, algo = "?", "?"
    return env, algo, f"{rd.parent.name}/{rd.name}" if rd.parent.name else rd.name


def default_output(run_dirs: list[Path]) -> Path:
    """Into the (first) run folder: curve.png for one run, compare.png for several."""
    return run_dirs[0] / ("curve.png" if len(run_dirs) == 1 else "compare.png")


def plot_runs(run_dirs: list[Path], out: Path | None = None) -> Path:
    out = out or default_output(run_dirs)
    fig, (ax_steps, ax_wall) = plt.subplots(1, 2, figsize=(11, 4.4), constrained_layout=True)
    about = [_about(rd) for rd in run_dirs]
    envs, algos = sorted({a[0] for a in about}), sorted({a[1] for a in about})
    names = ", ".join(a[2] for a in about)
    fig.suptitle(f"{' / '.join(envs)}: {' / '.join(algos)} ({names})"[:140], fontsize=10)
    for i, rd in enumerate(run_dirs):
        view = RunView(rd)
        view.poll()
        color = f"C{i % 10}"
        label = about[i][2] if len(run_dirs) > 1 else ""
        t0 = view.first_ts or 0.0
        for series, style, what in (
                (view.evals, "-o", "evaluation (deterministic, fresh episodes)"),
                (view.train, ":", "training episodes (samplers, exploring)")):
            if not series:
                continue
            steps, rets, ts = zip(*series)
            ax_steps.plot(steps, rets, style, color=color, ms=3, label=f"{label} {what}".strip())
            ax_wall.plot([t - t0 for t in ts], rets, style, color=color, ms=3,
                         label=f"{label} {what}".strip())
    ax_steps.set_xlabel("env steps")
    ax_steps.set_title("return by env steps", fontsize=9)
    ax_wall.set_title("return by wall time", fontsize=9)
    ax_wall.set_xlabel("wall seconds from the first role start")
    for ax in (ax_steps, ax_wall):
        ax.set_ylabel("return")
        ax.grid(alpha=0.3)
    ax_steps.legend(fontsize=7, title="mean return of", title_fontsize=7)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
