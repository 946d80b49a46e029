"""The launcher's terminal, without a job: the progress line says what the job
waits for until a trainer's first update, counts its rate since this launch
only and clamps its ETA; warnings print once per kind and are counted; the
closing block names the best checkpoint, the warnings and the next commands."""

from __future__ import annotations

import io
import json
import time

from launcher.report import Digest, Progress, Terminal, closing_block
from verl_zmq.ops.runview import KEEP_S, RunView


def _view(tmp_path, events: list[dict]) -> RunView:
    logs = tmp_path / "logs"
    logs.mkdir(exist_ok=True)
    by_member: dict[str, list[str]] = {}
    for e in events:
        by_member.setdefault(e["id"], []).append(json.dumps(e))
    for mid, lines in by_member.items():
        (logs / f"{mid}.jsonl").write_text("\n".join(lines) + "\n")
    v = RunView(tmp_path)
    v.poll()
    return v


def test_progress_says_what_it_waits_for_until_the_first_update(tmp_path):
    now = time.time()
    v = _view(tmp_path, [{"id": "sampler-0", "role": "sampler", "event": "role_started",
                          "ts": now}])
    p = Progress(v, 1000, ["learner-0"])
    assert "waiting for learner-0 (starting," in p.line()
    v = _view(tmp_path, [{"id": "learner-0", "role": "learner", "event": "role_started",
                          "ts": now}])
    assert "waiting for learner-0 (first batch," in Progress(v, 1000, ["learner-0"]).line()
    v = _view(tmp_path, [{"id": "learner-0", "role": "learner", "event": "first_update",
                          "ts": now}])
    assert "waiting" not in Progress(v, 1000, ["learner-0"]).line()


def test_the_rate_is_this_launchs_and_the_eta_never_goes_negative(tmp_path):
    old = time.time() - 3600  # a resumed run's past: fast steps an hour ago
    now = time.time() + 1
    events = [{"id": "learner-0", "role": "learner", "event": "first_update", "ts": old}]
    events += [{"id": "learner-0", "role": "learner", "event": "metrics", "ts": t,
                "learner/env_steps": n}
               for t, n in ((old, 0), (old + 1, 10_000), (now, 10_100), (now + 10, 10_200))]
    p = Progress(_view(tmp_path, events), 20_000, ["learner-0"])
    p.launched = now - 1
    assert "(10/s)" in p.line()  # 100 steps in 10 s, not the past's 10,000 a second
    assert "ETA 16:20" in p.line()
    p.total = 10_000  # past the budget: finishing, never a negative ETA
    assert p.line().endswith("finishing")


def test_warnings_print_once_per_kind_and_are_counted():
    out = io.StringIO()
    t = Terminal(out)
    ev = {"level": "warning", "event": "checkpoint_skipped", "id": "learner-0",
          "free_mb": 0.2, "min_free_mb": 64, "path": "run/checkpoints", "ts": 1.0}
    t.role_events([ev, ev, {**ev, "id": "learner-1"}, {**ev, "level": "info"}])
    assert out.getvalue().count("checkpoint_skipped") == 1
    assert "free_mb=0.2 min_free_mb=64 path=run/checkpoints" in out.getvalue()
    (w,) = t.digest.as_list()
    assert w["count"] == 3 and w["members"] == ["learner-0", "learner-1"]
    assert Digest().take({"level": "info", "event": "x"}) is None


def test_the_closing_block_names_the_best_checkpoint_warnings_and_next_commands(tmp_path):
    summary = {"status": "done", "wall_s": 75.0, "env_steps": 20480,
               "final_eval_return": 500.0, "best_eval_return": 500.0,
               "best_checkpoint": str(tmp_path / "checkpoints" / "best.pt"),
               "checkpoints_missing": True,
               "warnings": [{"event": "checkpoint_skipped", "level": "warning", "count": 5,
                             "members": ["learner-0"], "first": "free_mb=0.2"}],
               "failed_roles": {}}
    text = closing_block(summary, tmp_path, str(tmp_path / "summary.json"))
    assert text.startswith("done in 1:15: 20,480 env steps, final eval 500, best eval 500")
    for part in ("best.pt", "checkpoint_skipped x5 (learner-0): free_mb=0.2",
                 "exit code 3", "verl eval", "verl plot"):
        assert part in text, text


def test_the_launchers_view_keeps_no_growing_training_curve(tmp_path):
    """Every sampler's every metrics line would add a point: a view as long-lived
    as the job keeps the counts, not the curve (plots read the logs themselves)."""
    now = time.time()
    events = [{"id": "learner-0", "role": "learner", "event": "metrics", "ts": now + i,
               "learner/env_steps": 100 * (i + 1)} for i in range(50)]
    events += [{"id": "sampler-0", "role": "sampler", "event": "metrics", "ts": now + i,
                "sampler/episode_return_mean": float(i)} for i in range(50)]
    _view(tmp_path, events)  # writes the logs
    whole, bounded = RunView(tmp_path), RunView(tmp_path, keep_train=False)
    whole.poll()
    bounded.poll()
    assert len(whole.train) > 0 and bounded.train == []
    assert bounded.env_steps == whole.env_steps == 5000


def test_the_launchers_view_keeps_the_step_counts_rate_window_not_its_history(tmp_path):
    """A job's every metrics line may raise the count: the view keeps what the rate
    reads (the last KEEP_S of log time and the point before it), however long the
    job has run, and the rate is the same as with the whole history."""
    now = time.time()
    events = [{"id": "learner-0", "role": "learner", "event": "metrics", "ts": now + i,
               "learner/env_steps": 100 * (i + 1)} for i in range(3000)]
    v = _view(tmp_path, events)
    assert len(v.steps_at) <= KEEP_S + 2
    assert v.steps_at[0][0] <= now + 2999 - KEEP_S
    assert v.steps_per_s() == 100.0


def test_a_rate_shows_as_soon_as_the_count_rises_once(tmp_path):
    now = time.time()
    events = [{"id": "learner-0", "role": "learner", "event": "first_update", "ts": now},
              {"id": "learner-0", "role": "learner", "event": "metrics", "ts": now + 2,
               "learner/env_steps": 4000}]
    p = Progress(_view(tmp_path, events), 100_000, ["learner-0"])
    p.launched = now
    assert "(2,000/s)" in p.line() and "ETA 48s" in p.line()


def test_a_finished_trainings_line_says_which_evaluation_runs_and_how_far(tmp_path):
    now = time.time()
    events = [{"id": "learner-0", "role": "learner", "event": "first_update", "ts": now},
              {"id": "learner-0", "role": "learner", "event": "metrics", "ts": now + 1,
               "learner/env_steps": 1000},
              {"id": "evaluator-0", "role": "evaluator", "event": "eval_progress",
               "ts": now + 2, "what": "evaluation", "done": 4, "total": 10, "final": True}]
    p = Progress(_view(tmp_path, events), 1000, ["learner-0"])
    assert p.line().endswith("evaluation of the final policy (4/10 episodes)")
    events.append({"id": "evaluator-0", "role": "evaluator", "event": "eval_progress",
                   "ts": now + 3, "what": "evaluation", "done": 10, "total": 10})
    assert Progress(_view(tmp_path, events), 1000, ["learner-0"]).line().endswith("finishing")


def test_best_is_what_best_pt_holds_and_the_closing_block_says_so(tmp_path):
    now = time.time()
    events = [{"id": "evaluator-0", "role": "evaluator", "event": "evaluated", "ts": now,
               "env_steps": 1000, "eval/return_mean": 0.95},
              {"id": "evaluator-0", "role": "evaluator", "event": "best_kept", "ts": now,
               "env_steps": 1000, "return_mean": 0.92, "episodes": 30}]
    v = _view(tmp_path, events)
    assert v.best_return == 0.92 and v.best == (0.92, 1000, 30)
    summary = {"status": "interrupted", "wall_s": 5.0, "env_steps": 1000,
               "final_eval_return": 0.95, "best_eval_return": 0.92, "best_eval_episodes": 30,
               "best_eval_env_steps": 1000, "best_checkpoint": None, "warnings": [],
               "failed_roles": {}}
    text = closing_block(summary, tmp_path, "summary.json")
    assert "best eval 0.92 (best.pt's, on 30 episodes at 1,000 env steps)" in text
    assert f"verl-launch --resume {tmp_path}" in text  # an interrupted run continues


def test_a_roles_error_shows_once_however_many_die_of_it():
    out = io.StringIO()
    t = Terminal(out)
    err = "ValueError: obs['vel']: missing"
    for i in range(4):
        for event in ("role_died", "role_died", "role_failed"):
            t.launcher_event({"level": "warning", "event": event, "member": f"sampler-{i}",
                              "last_error": err, "exit_code": 1})
    assert out.getvalue().count(err) == 1, out.getvalue()
    assert out.getvalue().count("failed for good") == 4
    t.role_events([{"level": "error", "event": "task_failed", "id": "sampler-0",
                    "error": err}])
    assert out.getvalue().count(err) == 1  # the role's own line is the launcher's


def test_failed_roles_with_one_error_are_listed_together(tmp_path):
    summary = {"status": "failed", "wall_s": 4.0, "env_steps": 0, "final_eval_return": None,
               "best_eval_return": None, "best_checkpoint": None, "warnings": [],
               "failed_roles": {f"sampler-{i}": "ValueError: bad" for i in range(3)}}
    text = closing_block(summary, tmp_path, "summary.json")
    assert "failed for good: sampler-0, sampler-1, sampler-2\n    ValueError: bad" in text
    assert text.count("ValueError: bad") == 1
