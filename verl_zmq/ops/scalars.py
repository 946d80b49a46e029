"""What a run's log events chart, for every tracking backend alike (TensorBoard,
MLflow, Weights & Biases): learner, evaluator and peer metrics as scalars under
their own `role/name` keys, samplers' and shards' metrics aggregated over their
members (rates summed, the rest averaged), all against env steps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..config.roles import ROLE_TRAITS, ROLES
from .runview import RunView

SUMMED = ("_per_s", "/env_steps", "/fragments", "/inserts", "/served", "/transitions")
PER_MEMBER = tuple(r for r in ROLES if ROLE_TRAITS[r].charts in ("member", "each"))
AGGREGATED = tuple(r for r in ROLES if ROLE_TRAITS[r].charts == "sum")


@dataclass(frozen=True)
class Scalar:
    """One charted value: its key, value, env step and wall time (None: now)."""

    tag: str
    value: float
    step: int
    ts: float | None


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


class ScalarStream:
    """Turns new log events into scalars; keeps each aggregated member's latest
    metrics (a sampler's rate is summed with the others' last ones)."""

    def __init__(self, view: RunView):
        self.view = view
        self.latest: dict[str, dict[str, dict[str, Any]]] = {r: {} for r in AGGREGATED}

    def take(self, events: list[dict[str, Any]]) -> list[Scalar]:
        out: list[Scalar] = []
        changed: set[str] = set()
        for ev in events:
            name, role = ev.get("event"), ev.get("role")
            if name == "evaluated" and _number(ev.get("eval/return_mean")):
                step = int(ev.get("env_steps", self.view.env_steps))
                out += [Scalar(k, float(ev[k]), step, ev.get("ts"))
                        for k in ("eval/return_mean", "eval/return_std") if _number(ev.get(k))]
            elif name == "metrics" and role in PER_MEMBER:
                prefix = f"{ev.get('id')}/" if ROLE_TRAITS[role].charts == "each" else ""
                out += [Scalar(prefix + k, float(v), self.view.env_steps, ev.get("ts"))
                        for k, v in ev.items()
                        if "/" in k and not k.startswith("eval/") and _number(v)]
            elif name == "metrics" and role in AGGREGATED:
                self.latest[role][str(ev.get("id"))] = ev
                changed.add(role)
        for role in sorted(changed):
            out += self._aggregate(role)
        return out

    def _aggregate(self, role: str) -> list[Scalar]:
        members = list(self.latest[role].values())
        keys = {k for m in members for k, v in m.items() if "/" in k and _number(v)}
        out = []
        for k in sorted(keys):
            vals = [float(m[k]) for m in members if _number(m.get(k))]
            v = sum(vals) if k.endswith(SUMMED) else sum(vals) / len(vals)
            out.append(Scalar(k, v, self.view.env_steps, None))
        return out
