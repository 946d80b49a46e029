"""The Python API's callbacks (`verl_zmq.callbacks`), called from the supervisor's
progress loop with the events its `RunView` has just read: `on_evaluation` for
each evaluation, `on_metrics` for each trainer's metrics line. A hook's False or
`run.stop(...)` asks the supervisor to end the job; an exception does too, and
is kept for the caller of `train` to see once the job has stopped."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from verl_zmq.callbacks import RunState
from verl_zmq.config.roles import trains
from verl_zmq.ops.runview import RunView


class Hooks:
    """Calls each callback's hooks for new events; `stop(reason)` ends the job."""

    def __init__(self, callbacks: Sequence[Any], view: RunView, stop: Callable[[str], None]):
        self.callbacks = list(callbacks)
        self.view = view
        self.stop = stop
        self.error: BaseException | None = None

    def take(self, events: list[dict[str, Any]]) -> None:
        if not self.callbacks or self.error is not None:
            return
        for ev in events:
            name = ev.get("event")
            if name == "evaluated" and isinstance(ev.get("eval/return_mean"), int | float):
                self._call("on_evaluation", ev)
            elif name == "metrics" and trains(str(ev.get("role"))):
                self._call("on_metrics", ev)

    def _state(self) -> RunState:
        v = self.view
        return RunState(v.run_dir, v.env_steps, [(s, r) for s, r, _ in v.evals],
                        v.best_return, self.stop)

    def _call(self, hook: str, ev: dict[str, Any]) -> None:
        for cb in self.callbacks:
            fn = getattr(cb, hook, None)
            if fn is None:
                continue
            try:
                if fn(self._state(), dict(ev)) is False:
                    self.stop(f"{type(cb).__name__}.{hook} returned False")
            except Exception as e:
                self.error = e
                self.stop(f"{type(cb).__name__}.{hook} raised {type(e).__name__}: {e}")
                return
