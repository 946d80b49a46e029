"""What the launcher says on the terminal and in `summary.json`: one progress line
(redrawn on a terminal, a plain line per interval otherwise) that says what the
job is waiting for while nothing trains; every warning or error event of any
role, once per kind and then counted; the closing block with the best
checkpoint, the evaluations and the next commands."""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from verl_zmq.config.roles import role_traits
from verl_zmq.log import errno_name, readable
from verl_zmq.ops.runview import RunView

if TYPE_CHECKING:
    from verl_zmq.config.multiagent import MultiAgent

# the fields every event carries: not what a user needs to read about a warning
BOILERPLATE = {"ts", "level", "event", "role", "id", "group", "incarnation", "host", "pid",
               "exception"}
# a role's own error events that the launcher's `role_died` line repeats (with the
# error the role wrote last): counted, not shown
SAID_BY_LAUNCHER = {"task_failed"}
ROLE_ENDS = ("role_died", "role_failed", *SAID_BY_LAUNCHER)
# a finished run whose checkpoints were not all written: the closing block says so
CHECKPOINT_EVENTS = ("checkpoint_skipped", "checkpoint_failed")


def fmt_return(x: float | None) -> str:
    """A return as a person reads it: 4 significant digits, "-" when there is none."""
    return "-" if x is None else f"{x:.4g}"


def fmt_duration(s: float) -> str:
    s = max(0, int(round(s)))
    h, m, sec = s // 3600, s // 60 % 60, s % 60
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}" if m else f"{sec}s"


def _fields(ev: dict[str, Any]) -> str:
    out = []
    for k, v in ev.items():
        if k in BOILERPLATE:
            continue
        s = f"{v:.4g}" if isinstance(v, float) else str(v)
        out.append(f"{k}={s if len(s) <= 120 else s[:117] + '...'}")
    return " ".join(out)


@dataclass
class Digest:
    """Warning and error events of every role, by kind (event name)."""

    kinds: dict[str, dict[str, Any]] = field(default_factory=dict)

    def take(self, ev: dict[str, Any]) -> str | None:
        """Count a warning or error; the line to print the first time its kind comes."""
        level = ev.get("level")
        if level not in ("warning", "error") or not isinstance(ev.get("event"), str):
            return None
        name = ev["event"]
        k = self.kinds.get(name)
        if k is None:
            self.kinds[name] = {"event": name, "level": level, "count": 1,
                                "members": [ev.get("id", "?")], "first": _fields(ev)}
            return f"{level}: {ev.get('id', '?')}: {name} {_fields(ev)}".rstrip()
        k["count"] += 1
        if ev.get("id") not in k["members"] and len(k["members"]) < 16:
            k["members"].append(ev.get("id", "?"))
        return None

    def as_list(self) -> list[dict[str, Any]]:
        return list(self.kinds.values())


class Terminal:
    """The launcher's terminal. Messages print above the progress line; launcher
    events show with `verbose`, its warnings and errors always, and every role's
    warnings and errors (read from their logs) once per kind."""

    def __init__(self, stream: IO[str], verbose: bool = False):
        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.verbose = verbose
        self.digest = Digest()
        self.line = ""
        self.errors_shown: set[str] = set()  # role errors already on the terminal
        self.resumed: set[Any] = set()  # trainers whose `resumed` was shown

    def _write(self, text: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.stream.write(text)
            self.stream.flush()

    def say(self, text: str) -> None:
        """A message above the progress line (which is redrawn after it)."""
        if self.tty and self.line:
            self._write("\r\x1b[K" + text + "\n" + self.line)
        else:
            self._write(text + "\n")

    def progress(self, line: str) -> None:
        self.line = line
        self._write(("\r" + line + "\x1b[K") if self.tty else line + "\n")

    def launcher_event(self, ev: dict[str, Any]) -> None:
        """The launcher's own log events (its logger's echo). A role's death is
        shown with its error the first time that error comes; the same error again
        (a restart, or every sampler of a broken env) is counted, not repeated."""
        name = ev.get("event")
        if name in ("role_died", "role_failed"):
            self.digest.take(ev)
            line = self._role_end(ev)
            if line:
                self.say(line)
            return
        said = self.digest.take(ev)
        if self.verbose:
            self.say(readable(ev))
        elif said is not None:
            self.say(said)

    def _role_end(self, ev: dict[str, Any]) -> str:
        err = str(ev.get("last_error") or f"exit code {ev.get('exit_code')}")
        member, new = ev.get("member", "?"), err not in self.errors_shown
        self.errors_shown.add(err)
        if ev["event"] == "role_failed":
            return f"error: {member} failed for good: {err if new else '(the same error)'}"
        return f"warning: {member} died: {err}; restarting" if new else ""

    def role_events(self, events: list[dict[str, Any]]) -> None:
        for ev in events:
            line = self.digest.take(ev)
            if line is not None and ev.get("event") not in SAID_BY_LAUNCHER:
                self.say(line)
            elif ev.get("event") == "resumed" and ev.get("id") not in self.resumed:
                # where a trainer continues from, once (a later takeover is logged only)
                self.resumed.add(ev.get("id"))
                where = _short_path(ev.get("checkpoint", "?"))
                self.say(f"{ev.get('id')} continues from env step {ev.get('env_steps', 0):,}, "
                         f"version {ev.get('version', '?')} ({where})")

    def end(self) -> None:
        if self.tty and self.line:
            self._write("\n")
        self.line = ""


class Progress:
    """The progress line, from the run's one reader of progress (`RunView`): env
    steps and their rate since this launch (or resume), evaluations, the ETA, and
    while nothing trains yet what the job is waiting for."""

    def __init__(self, view: RunView, total: int, trainers: list[str]):
        self.view = view
        self.total = total
        self.trainers = trainers
        self.t0 = time.monotonic()
        self.launched = time.time()

    def waiting(self) -> str:
        """What the job waits for before its first update here; "" once training."""
        v = self.view
        if any(m in v.trained for m in self.trainers) or not self.trainers:
            return ""
        m = v.members.get(self.trainers[0])
        what = "starting" if m is None or m.state == "starting" else "first batch"
        return f"waiting for {self.trainers[0]} ({what}, {time.monotonic() - self.t0:.0f} s)"

    def line(self) -> str:
        v = self.view
        elapsed = time.monotonic() - self.t0
        rets = v.eval_returns
        head = f"[{fmt_duration(elapsed):>7}] env steps {v.env_steps:,}/{self.total:,}"
        wait = self.waiting()
        if wait:
            return f"{head} | {wait}"
        rate = v.steps_per_s(since=self.launched)
        left = max(0, self.total - v.env_steps)
        eta = (self.ending() if left == 0 or v.finished else
               f"ETA {fmt_duration(left / rate)}" if rate > 0 else "ETA -")
        return (f"{head} ({rate:,.0f}/s) | eval {fmt_return(rets[-1] if rets else None)} "
                f"(best {fmt_return(v.best_return)}) | {eta}")

    def ending(self) -> str:
        """What a job whose training ended is doing: the evaluation under way and its
        episodes, else "finishing"."""
        ev = self.view.evaluating or {}
        done, total = ev.get("done"), ev.get("total")
        if not (isinstance(done, int) and isinstance(total, int) and done < total):
            return "finishing"
        final = " of the final policy" if ev.get("final") else ""
        return f"{ev.get('what', 'evaluation')}{final} ({done}/{total} episodes)"


def trainer_ids(placements: list[Any]) -> list[str]:
    return [p.member_id for p in placements if role_traits(p.role).trains]


def write_summary(path: Path, summary: dict[str, Any], console: IO[str]) -> str:
    """summary.json; where it cannot be written (a full disk), its content on stdout
    after one line on the console naming the path and the error. Where it went."""
    text = json.dumps(summary, indent=2)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text)
        tmp.replace(path)
        return str(path)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        with contextlib.suppress(OSError, ValueError):
            console.write(f"error: cannot write {path}: {e.strerror or e} ({errno_name(e)}); "
                          f"the summary follows on stdout\n")
            print(text, flush=True)
        return "stdout"


def _short_path(p: Path | str) -> str:
    """A path as the user typed it: relative to the working directory when inside it."""
    with contextlib.suppress(ValueError, OSError):
        return str(Path(p).resolve().relative_to(Path.cwd()))
    return str(p)


def best_checkpoints(run_dir: Path, ma: MultiAgent) -> dict[str, str]:
    """The best.pt files a run holds: {"": checkpoints/best.pt}, or with several
    trained policies each one's own, {policy: checkpoints/<policy>/best.pt}."""
    bests = {f: run_dir / "checkpoints" / f / "best.pt"
             for f in map(ma.checkpoint_folder, ma.trained)}
    return {f: str(b) for f, b in bests.items() if b.exists()}


def closing_block(summary: dict[str, Any], run_dir: Path, where: str) -> str:
    """What a finished launch prints last: how it ended, the evaluations, the best
    checkpoint, the warnings, and the next commands."""
    rd = _short_path(run_dir)
    best_on = summary.get("best_eval_episodes")
    lines = [f"{summary['status']} in {fmt_duration(summary['wall_s'])}: "
             f"{summary['env_steps']:,} env steps, final eval "
             f"{fmt_return(summary['final_eval_return'])}, best eval "
             f"{fmt_return(summary['best_eval_return'])}"
             + (f" (best.pt's, on {best_on} episodes at {summary['best_eval_env_steps']:,} "
                f"env steps)" if best_on else "")]
    if summary.get("stopped_by"):
        lines.append(f"  stopped by      {summary['stopped_by']}")
    best = summary.get("best_checkpoint")
    each = summary.get("best_checkpoints") or {}
    if each:  # several trained policies: each one's
        lines += [f"  best of {p:<8} {_short_path(b)}" for p, b in each.items()]
    else:
        lines.append(f"  best checkpoint  {_short_path(best) if best else '- (none written)'}")
    lines.append(f"  summary          {_short_path(where) if where != 'stdout' else 'stdout'}")
    for w in summary.get("warnings", []):
        if w["event"] in ROLE_ENDS:  # the restarts and failures below say it
            if w["event"] == "role_died":
                n = sum(summary.get("restarts", {}).values())
                lines.append(f"  {'warning':<16} roles died x{w['count']}"
                             + (f" ({n} restarted)" if n else ""))
            continue
        lines.append(f"  {w['level']:<16} {w['event']} x{w['count']} "
                     f"({', '.join(w['members'][:4])}): {w['first']}"[:200])
    by_error: dict[str, list[str]] = {}
    for m, err in summary.get("failed_roles", {}).items():
        by_error.setdefault(err, []).append(m)
    for err, members in by_error.items():
        lines.append(f"failed for good: {', '.join(members)}\n"
                     + "\n".join(f"    {ln}" for ln in err.splitlines())
                     + f"\n    (traceback: {rd}/logs/{members[0]}.err)")
    if summary.get("checkpoints_missing"):
        lines.append("  checkpoints were skipped or failed: a resume starts from the last one "
                     "written (see above; exit code 3)")
    lines.append("next:")
    if summary["status"] == "interrupted":
        lines.append(f"  verl-launch --resume {rd}")
    if best:
        lines.append(f"  verl eval {_short_path(best)}")
    lines += [f"  verl plot {rd}", f"  verl logs {rd} --level warning"]
    if (Path(run_dir) / "tb").is_dir():
        lines.append(f"  tensorboard --logdir {rd}/tb")
    return "\n".join(lines) + "\n"
