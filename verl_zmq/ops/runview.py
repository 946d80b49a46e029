"""What a run folder's logs say about the run, followed incrementally: each
member's state and latest metrics, the env-step count and its rate, the eval
history. The one reader of run progress: the launcher's progress line and
summary.json, the TensorBoard writer, the dashboard and the plots all read a
run through this."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from .logview import _Tail

STEP_KEYS = ("learner/env_steps", "peer/env_steps")
DROPPED_KEYS = ("learner/fragments_dropped", "peer/fragments_dropped")
RATE_WINDOW_S = 30.0  # the env-step rate is measured over this much log time
KEEP_S = 4 * RATE_WINDOW_S  # the count's history kept for it


@dataclass
class MemberView:
    """One member as its log shows it."""

    id: str
    role: str = "?"
    state: str = "starting"
    last_ts: float = 0.0
    metrics: dict = field(default_factory=dict)


@dataclass
class RunView:
    """Follows every `logs/*.jsonl` of a run folder; call `poll()` to read new lines."""

    run_dir: Path
    members: dict[str, MemberView] = field(default_factory=dict)
    env_steps: int = 0
    first_ts: float | None = None
    evals: list[tuple[int, float, float]] = field(default_factory=list)  # steps, ret, ts
    train: list[tuple[int, float, float]] = field(default_factory=list)  # sampler returns
    # the training-return curve grows with every sampler's every metrics line: a plot
    # wants it whole; a view that lives as long as the job (the launcher's) keeps none
    keep_train: bool = True
    finished: bool = False
    trained: set[str] = field(default_factory=set)  # trainers that logged `first_update`
    updated_at: dict[str, float] = field(default_factory=dict)  # their latest one's log time
    dropped: int = 0  # fragments the learners dropped for lag (max over them)
    # what best.pt holds, as the evaluator kept it: (mean return, env steps, episodes)
    best: tuple[float, int, int] | None = None
    evaluating: dict | None = None  # the evaluator's latest `eval_progress` event
    last_eval: dict = field(default_factory=dict)  # the latest `evaluated` event
    # (log time, env steps) whenever the count rose: rates come from the logs' own
    # clocks, not from how often someone polls. Only the last KEEP_S of log time is
    # kept (and the point before it): a view lives as long as the job
    steps_at: deque = field(default_factory=lambda: deque(maxlen=4096))
    _tails: dict[Path, _Tail] = field(default_factory=dict)
    _sampler_returns: dict[str, float] = field(default_factory=dict)
    _peer_steps: dict[str, int] = field(default_factory=dict)  # DAPO: the group is their sum

    def poll(self) -> list[dict]:
        """Read what was appended since the last call; returns the new events by time."""
        for p in sorted((self.run_dir / "logs").glob("*.jsonl")):
            if p.stem != "launcher":
                self._tails.setdefault(p, _Tail(p))
        new = [e for t in self._tails.values() for e in t.read()]
        new.sort(key=lambda e: e["ts"] if isinstance(e.get("ts"), int | float) else 0.0)
        for ev in new:
            self._take(ev)
        return new

    def _take(self, ev: dict) -> None:
        mid, name = ev.get("id"), ev.get("event")
        if not isinstance(mid, str):
            return
        ts = ev["ts"] if isinstance(ev.get("ts"), int | float) else 0.0
        if ts and name == "role_started":
            self.first_ts = ts if self.first_ts is None else min(self.first_ts, ts)
        m = self.members.setdefault(mid, MemberView(mid))
        m.role = ev.get("role", m.role)
        m.last_ts = max(m.last_ts, ts)
        if name == "role_started":
            m.state = "running"
        elif name == "role_stopped":
            m.state = "stopped" if ev.get("exit_code") == 0 else f"exit {ev.get('exit_code')}"
        elif name == "task_failed":
            m.state = "failed"
        elif name == "metrics":
            self._metrics(m, ev, ts)
        elif name == "evaluated" and isinstance(ev.get("eval/return_mean"), int | float):
            steps = int(ev.get("env_steps", 0))
            self.last_eval = ev
            self._steps(steps, ts, ev.get("member"))  # fresher than metrics
            # what evaluations are ranked by: the mean return, or a rating (a
            # multi-agent job's against its references)
            score = ev.get("score", ev["eval/return_mean"])
            self.evals.append((self.env_steps if self._peer_steps else steps, float(score), ts))
        elif name == "best_kept" and isinstance(ev.get("return_mean"), int | float):
            self.best = (float(ev["return_mean"]), int(ev.get("env_steps", 0)),
                         int(ev.get("episodes", 0)))
        elif name == "eval_progress":
            self.evaluating = ev
        elif name == "first_update":
            self.trained.add(mid)
            self.updated_at[mid] = ts
        elif name == "training_finished":
            self.finished = True
            if isinstance(ev.get("env_steps"), int):
                self._steps(ev["env_steps"], ts, mid)

    def _metrics(self, m: MemberView, ev: dict, ts: float) -> None:
        m.metrics = ev
        for k in STEP_KEYS:
            if isinstance(ev.get(k), int | float):
                self._steps(int(ev[k]), ts, m.id)
        for k in DROPPED_KEYS:
            if isinstance(ev.get(k), int | float):
                self.dropped = max(self.dropped, int(ev[k]))
        # training return as the samplers see it: every algorithm has it
        r = ev.get("sampler/episode_return_mean")
        if isinstance(r, int | float) and self.env_steps > 0:
            self._sampler_returns[m.id] = float(r)  # mean over samplers, latest each
            vals = self._sampler_returns.values()
            if self.keep_train:
                self.train.append((self.env_steps, sum(vals) / len(vals), ts))

    def _steps(self, n: int, ts: float, member=None) -> None:
        """A trainer's env steps: the job's are a learner's, or the sum of the peers'."""
        if isinstance(member, str) and member.startswith("peer-"):
            self._peer_steps[member] = max(self._peer_steps.get(member, 0), n)
            n = sum(self._peer_steps.values())
        if n > self.env_steps:
            self.env_steps = n
            if ts:
                at = self.steps_at
                at.append((ts, n))
                while len(at) > 2 and at[1][0] < ts - KEEP_S:
                    at.popleft()

    def steps_per_s(self, window_s: float = RATE_WINDOW_S, since: float = 0.0) -> float:
        """Env steps per second over the last `window_s` of log time (at least the
        last two points that the count rose at), counting only points logged at or
        after `since` (a resumed run's rate is this launch's); with one such point,
        its rise since `since` (from the count before it); 0 before the count rose."""
        pts = [p for p in self.steps_at if p[0] >= since] if since else list(self.steps_at)
        if not pts:
            return 0.0
        t_last, n_last = pts[-1]
        if len(pts) < 2:
            if not since or t_last <= since:
                return 0.0
            before = [n for t, n in self.steps_at if t < since]
            return max(0.0, n_last - (before[-1] if before else 0)) / (t_last - since)
        first = next(((t, n) for t, n in pts if t >= t_last - window_s and t < t_last), pts[-2])
        return (n_last - first[1]) / max(t_last - first[0], 1e-9)

    @property
    def eval_returns(self) -> list[float]:
        return [r for _, r, _ in self.evals]

    @property
    def best_return(self) -> float | None:
        """The best evaluation as best.pt holds it (a candidate's confirmed return),
        else the highest evaluation logged."""
        if self.best is not None:
            return self.best[0]
        rets = self.eval_returns
        return max(rets) if rets else None

    def age(self, m: MemberView, now: float | None = None) -> float:
        """Seconds since the member last logged (metrics come every logging interval)."""
        return (now or time.time()) - m.last_ts if m.last_ts else float("inf")

    def info_means(self) -> dict[str, tuple[float | None, float | None]]:
        """Each `logging.info_keys` number: (the samplers' mean over their running
        members' latest, the latest evaluation's)."""
        keys = {k.removeprefix("sampler/info/") for m in self.members.values()
                for k in m.metrics if k.startswith("sampler/info/")}
        keys |= {k.removeprefix("eval/") for k in self.last_eval
                 if k.startswith("eval/") and not k.startswith("eval/return_")}
        out = {}
        for k in sorted(keys):
            vals = [float(m.metrics[f"sampler/info/{k}"]) for m in self.members.values()
                    if isinstance(m.metrics.get(f"sampler/info/{k}"), int | float)]
            ev = self.last_eval.get(f"eval/{k}")
            out[k] = (sum(vals) / len(vals) if vals else None,
                      float(ev) if isinstance(ev, int | float) else None)
        return out

    def rate(self, role: str, key: str) -> float:
        """The sum over running members of `role` of their latest `key`."""
        return sum(float(m.metrics.get(key, 0.0)) for m in self.members.values()
                   if m.role == role and m.state == "running")
