"""End to end: the README's main job as real processes. One live run is shared
by every check here: it learns CartPole to 475 within 100k env steps while a
sampler is killed with -9 and restarted by the launcher."""

from __future__ import annotations

import json

import pytest

from tests.conftest import CONFIGS, read_events, verl, verl_here

pytestmark = pytest.mark.e2e  # real processes

TARGET, BUDGET = 475.0, 100_000  # the shared live run is `cartpole_run` in conftest


@pytest.mark.timeout(900)
def test_main_job_reaches_target_within_budget(cartpole_run):
    r = cartpole_run
    assert r["rc"] == 0, r["stderr"][-3000:]
    summary = json.loads((r["run"] / "summary.json").read_text())
    assert summary["status"] == "done"
    reached = [e for e in summary["evaluations"] if e["return_mean"] >= TARGET]
    assert reached, summary["evaluations"]
    assert reached[0]["env_steps"] <= BUDGET
    assert summary["best_eval_return"] >= TARGET


@pytest.mark.timeout(900)
def test_killed_sampler_is_restarted_and_logged(cartpole_run):
    run = cartpole_run["run"]
    events = read_events(run / "logs" / "launcher.jsonl")
    died = [e for e in events if e.get("event") == "role_died" and e.get("member") == "sampler-1"]
    restarted = [e for e in events if e.get("event") == "role_restarted"
                 and e.get("member") == "sampler-1"]
    assert died and died[0]["exit_code"] == -9
    assert restarted
    starts = [e for e in read_events(run / "logs" / "sampler-1.jsonl")
              if e.get("event") == "role_started"]
    assert len(starts) >= 2 and starts[0]["incarnation"] != starts[-1]["incarnation"]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["restarts"].get("sampler-1", 0) >= 1


@pytest.mark.timeout(900)
def test_run_folder_holds_every_role_log_and_the_resolved_job(cartpole_run):
    run = cartpole_run["run"]
    plan = json.loads((run / "plan.json").read_text())
    for p in plan["placements"]:
        log = run / "logs" / f"{p['member_id']}.jsonl"
        evs = read_events(log)
        assert evs, log
        for e in evs:
            for k in ("ts", "level", "event", "role", "id", "group", "incarnation", "host", "pid"):
                assert k in e, (log, e)
        assert any(e["event"] == "role_stopped" and e.get("exit_code") == 0 for e in evs), log
    assert "[algorithm.params]" in (run / "job.toml").read_text()
    assert (run / "checkpoints" / "latest.pt").exists()
    assert (run / "checkpoints" / "best.pt").exists()


@pytest.mark.timeout(900)
def test_verl_logs_merges_and_filters(cartpole_run):
    run = cartpole_run["run"]
    r = verl_here("logs", str(run), "--json")
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert {e["id"] for e in lines} >= {"registry", "learner-0", "replay-0", "sampler-0"}
    ts = [e["ts"] for e in lines]
    assert ts == sorted(ts)
    r = verl_here("logs", str(run), "--role", "evaluator", "--event", "evaluated")
    # as many as the evaluator logged (one where the run reached 475 at its first)
    logged = [e for e in read_events(run / "logs" / "evaluator-0.jsonl")
              if e.get("event") == "evaluated"]
    assert r.returncode == 0 and logged and r.stdout.count(" evaluated ") == len(logged)
    assert all("evaluator-0" in line for line in r.stdout.splitlines())
    r = verl_here("logs", str(run), "--role", "sampler-1", "--json")  # a member id
    assert r.returncode == 0 and {json.loads(x)["id"] for x in r.stdout.splitlines()} == \
        {"sampler-1"}
    assert verl_here("logs", str(run), "--role", "sampler-99").returncode == 2
    r = verl_here("logs", str(run), "--level", "warning", "--json")
    assert all(json.loads(x)["level"] in ("warning", "error") for x in r.stdout.splitlines())


@pytest.mark.timeout(300)
def test_verl_run_in_one_process(tmp_path):
    """Every role as a task in one process over inproc://, tiny budget."""
    r = verl("run", str(CONFIGS / "cartpole_ppo.toml"), "--run-dir", str(tmp_path),
             "--set", "training.total_timesteps=4000", "--set", "sampling.num_workers=2",
             "--set", "evaluation.interval_steps=2000", timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    events = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    assert any(e.get("event") == "evaluated" for e in events)
    assert any(e.get("event") == "training_finished" for e in events)


@pytest.mark.timeout(900)
def test_best_model_is_kept_on_a_confirmed_evaluation(cartpole_run):
    """The first evaluation has nothing to beat: it is kept on its own mean. A later
    new best is evaluated again on other episode seeds (3 x n_eval_episodes of
    them); best.pt holds that second evaluation's mean, and only candidates whose
    second evaluation beats the previous best replaced it. The evaluation that
    reaches `stop_at_return` ends the job at once: a new best there is kept on its
    own mean (the job stops on those params). best.pt holds what the last
    `best_kept` says, which is the best the launcher reports."""
    import torch

    run = cartpole_run["run"]
    events = read_events(run / "logs" / "evaluator-0.jsonl")
    evaluated = [e for e in events if e.get("event") == "evaluated"]
    checked = [e for e in events if e.get("event") == "best_checked"]
    kept = [e for e in events if e.get("event") == "best_kept"]
    assert kept and kept[0]["env_steps"] == evaluated[0]["env_steps"]
    assert kept[0]["episodes"] == evaluated[0]["episodes"]  # not evaluated again
    assert evaluated[0]["env_steps"] not in {e["env_steps"] for e in checked}
    for e in checked:
        assert e["episodes"] == 3 * evaluated[0]["episodes"]
        assert e["kept"] == (e["second"] > e["previous_best"])
    stop = next(e for e in events if e.get("event") == "target_reached")
    assert stop["env_steps"] not in {e["env_steps"] for e in checked}  # no second evaluation
    best = torch.load(run / "checkpoints" / "best.pt", weights_only=True)
    assert float(best["eval_return_mean"]) == pytest.approx(kept[-1]["return_mean"])
    assert int(best["env_steps"]) == kept[-1]["env_steps"]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["best_eval_return"] == pytest.approx(kept[-1]["return_mean"])


@pytest.mark.timeout(900)
def test_the_terminal_shows_progress_warnings_and_a_closing_block_not_the_launchers_log(
        cartpole_run):
    err = cartpole_run["stderr"]
    lines = err.splitlines()
    assert not any(" role_started " in ln or " role_exited " in ln for ln in lines), err[-2000:]
    progress = [ln for ln in lines if ln.startswith("[") and "env steps" in ln]
    # a line at the end at least, however fast the job was (what it says before the first
    # update: test_report.py)
    assert progress, err[-2000:]
    assert any("sampler-1 died" in ln for ln in lines), err[-2000:]  # a warning
    tail = err[err.index("done in "):]
    for part in ("best checkpoint", "checkpoints/best.pt", "next:", "verl eval", "verl plot"):
        assert part in tail, tail
    summary = json.loads((cartpole_run["run"] / "summary.json").read_text())
    assert summary["best_checkpoint"].endswith("best.pt")
    assert any(w["event"] == "role_died" for w in summary["warnings"]), summary["warnings"]
