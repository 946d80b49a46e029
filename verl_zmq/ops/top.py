"""`verl top RUN_DIR`: a live dashboard of a run from its logs (rich). Works while
the job runs (it follows the logs) and on a finished run (it shows the end); it
quits on `q` (or Ctrl-C) and when the run ends."""

from __future__ import annotations

import sys
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
        best = view.best_return
        shown = "-" if best is None else f"{best:.1f}"
        head.append(f"eval return {evals[-1]:.1f} (best {shown})  ")
        head.append(sparkline(evals), style="green")
    else:
        head.append("eval return -")
    for k, (train, ev) in view.info_means().items():
        head.append(f"\n{k}: training {'-' if train is None else f'{train:.3g}'}, "
                    f"eval {'-' if ev is None else f'{ev:.3g}'}")
    if not ended:
        head.append("\n(q quits)", style="dim")
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


def ended(view: RunView) -> bool:
    """The run is over: its launcher wrote summary.json."""
    return (view.run_dir / "summary.json").exists()


def run_top(run_dir: Path, refresh: float = 0.5, once: bool = False) -> None:
    """Draw `render` every `refresh` seconds until `q` (or Ctrl-C) is pressed or the
    run ends (its last frame stays on the screen)."""
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
                  screen=False) as live, _Keys() as keys:
            while not ended(view):
                if keys.pressed(refresh) in ("q", "Q"):
                    break
                view.poll()
                live.update(render(view))
            view.poll()
            live.update(render(view))
    except KeyboardInterrupt:
        pass


class _Keys:
    """Single key presses from a terminal's stdin, unbuffered while in use; where
    stdin is not a terminal, none (`pressed` only waits)."""

    def __enter__(self) -> _Keys:
        self.saved = None
        if sys.stdin.isatty():
            import termios
            import tty

            fd = sys.stdin.fileno()
            self.saved = termios.tcgetattr(fd)
            tty.setcbreak(fd)
        return self

    def pressed(self, timeout: float) -> str:
        """A key pressed within `timeout` seconds, or ""."""
        if self.saved is None:
            time.sleep(timeout)
            return ""
        import select

        ready, _, _ = select.select([sys.stdin], [], [], timeout)
        return sys.stdin.read(1) if ready else ""

    def __exit__(self, *exc: object) -> None:
        if self.saved is not None:
            import termios

            termios.tcsetattr(sys.stdin.fileno(), termios.TCSADRAIN, self.saved)
