"""`verl plot`: eval and training return against env steps and wall time for one
or several runs, overlaid (matplotlib, the `plot` extra)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display needed on a cluster node
import matplotlib.pyplot as plt  # noqa: E402

from .runview import RunView  # noqa: E402


def plot_runs(run_dirs: list[Path], out: Path) -> Path:
    fig, (ax_steps, ax_wall) = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    for i, rd in enumerate(run_dirs):
        view = RunView(rd)
        view.poll()
        color = f"C{i % 10}"
        label = rd.name if rd.name not in ("run", "") else str(rd)
        t0 = view.first_ts or 0.0
        for series, style, what in ((view.evals, "-o", "eval"), (view.train, ":", "train")):
            if not series:
                continue
            steps, rets, ts = zip(*series)
            ax_steps.plot(steps, rets, style, color=color, ms=3, label=f"{label} {what}")
            ax_wall.plot([t - t0 for t in ts], rets, style, color=color, ms=3,
                         label=f"{label} {what}")
    ax_steps.set_xlabel("env steps")
    ax_wall.set_xlabel("wall seconds from the first role start")
    for ax in (ax_steps, ax_wall):
        ax.set_ylabel("return")
        ax.grid(alpha=0.3)
    ax_steps.legend(fontsize=7)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
