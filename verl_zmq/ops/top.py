"""`verl top RUN_DIR`: a live dashboard of a run from its logs (rich). Works while
the job runs (it follows the logs) and on a finished run (it shows the end)."""

from __future__ import annotations

import time
from pathlib import Path

from .runview import RunView

BLOCKS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float], width: int = 40) -> str:
    v = values[-width:]
    if not v:
        return ""
    lo, hi = min(v), max(v)
    span = hi - lo or 1.0
    return "".join(BLOCKS[min(7, int((x - lo) / span * 7.999))] for x in v)


def _num(m: dict, *keys: str, fmt: str = "{:,.0f}") -> str:
    for k in keys:
        v = m.get(k)
        if isinstance(v, int | float):
            return fmt.format(v)
    return "-"


# per role: (env steps/s, queue or buffer, policy lag, loss, entropy, grad norm)
def _row_values(role: str, m: dict) -> list[str]:
    return [
        _num(m, f"{role}/env_steps_per_s"),
        _num(m, "replay/size", "sampler/fragments_in_flight", "learner/pending_steps"),
        _num(m, "learner/policy_lag_mean", "peer/policy_lag_mean", fmt="{:.2f}"),
        _num(m, "losses/policy_loss", "losses/td_loss", "losses/q_loss", fmt="{:.3g}"),
        _num(m, "losses/entropy", "losses/alpha", fmt="{:.3f}"),
        _num(m, "losses/grad_norm", fmt="{:.3g}"),
    ]


def render(view: RunView):
    """One frame: a header with totals and eval return, and a row per member."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    now = time.time()
    ended = view.finished or (view.members and all(
        m.state != "running" for m in view.members.values()))
    end = max((m.last_ts for m in view.members.values()), default=now) if ended else now
    elapsed = end - view.first_ts if view.first_ts else 0.0
    rate = view.rate("learner", "learner/env_steps_per_s") or view.rate(
        "peer", "peer/env_steps_per_s")
    evals = [r for _, r, _ in view.evals]
    head = Text()
    head.append(f"{view.run_dir}\n", style="bold")
    head.append(f"env steps {view.env_steps:,}  ({rate:,.0f}/s)  elapsed {elapsed:,.0f}s  ")
    head.append("ended\n" if ended else "\n")
    if evals:
        head.append(f"eval return {evals[-1]:.1f} (best {max(evals):.1f})  ")
        head.append(sparkline(evals), style="green")
    else:
        head.append("eval return -")
    from rich import box

    table = Table(expand=False, header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False,
                  padding=(0, 1))
    for col in ("member", "state", "age s", "steps/s", "queue", "lag", "loss", "entropy",
                "gnorm"):
        left = col in ("member", "state")
        table.add_column(col, justify="left" if left else "right",
                         min_width=12 if col == "member" else None)
    for mid in sorted(view.members):
        m = view.members[mid]
        age = view.age(m, now)
        style = None if m.state == "running" else "dim"
        table.add_row(mid, m.state, "-" if age == float("inf") else f"{age:.0f}",
                      *_row_values(m.role, m.metrics), style=style)
    return Group(head, table)


def run_top(run_dir: Path, refresh: float = 0.5, once: bool = False) -> None:
    from rich.console import Console
    from rich.live import Live

    view = RunView(run_dir)
    view.poll()
    console = Console()
    if once:
        console.print(render(view))
        return
    try:
        with Live(render(view), console=console, refresh_per_second=max(1, int(1 / refresh)),
                  screen=False) as live:
            while True:
                time.sleep(refresh)
                view.poll()
                live.update(render(view))
    except KeyboardInterrupt:
        pass
