"""Operations on one live CartPole DQN job: stopped with SIGTERM part way, resumed
with `--resume` (learner from latest.pt, shard from its snapshot, counters
continuing), a shard killed with -9 while resumed (restarted by the launcher,
restored from its last periodic snapshot), and the job still reaches 475."""

from __future__ import annotations

import json
import os
import pty
import re
import signal
import subprocess
import threading
import time

import pytest

from tests.conftest import (
    CONFIGS,
    PY,
    ROOT,
    free_port_range,
    kill_member,
    kill_tree,
    read_events,
    verl_here,
    wait_for,
)

pytestmark = pytest.mark.e2e  # real processes

TARGET = 475.0
STOP_AT = 4000  # env steps: where the first part is stopped


def _start(run, lo, hi, *extra, target=TARGET):
    return subprocess.Popen(
        [PY, "-m", "launcher.cli", str(CONFIGS / "hosts.local.txt"),
         str(CONFIGS / "cartpole_dqn.toml"), "--set", f"launch.port_range=[{lo}, {hi}]",
         "--set", f"evaluation.stop_at_return={target}",
         "--set", "replay.snapshot_interval_s=2", "--set", "logging.interval_s=0.5",
         # DQN's steps to 475 vary a lot and some runs never get there (issue 17's
         # subject): this checks that a resumed job trains on and ends cleanly, and
         # stops early when it does reach 475; the job's own evaluation interval
         "--set", "training.total_timesteps=40000", *extra],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)


class TopCapture:
    """`verl top` on a pseudo-terminal, its screen output collected in a thread."""

    def __init__(self, run):
        master, slave = pty.openpty()
        env = {**os.environ, "COLUMNS": "120", "LINES": "40", "TERM": "xterm"}
        self.proc = subprocess.Popen([PY, "-m", "verl_zmq.cli", "top", str(run), "--refresh",
                                      "0.5"], cwd=ROOT, stdin=slave, stdout=slave,
                                     stderr=slave, env=env, start_new_session=True)
        os.close(slave)
        self.master, self.chunks = master, []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:
                return
            if not data:
                return
            self.chunks.append(data)

    def quit(self) -> tuple[str, bool]:
        """Press q: (the screen output, whether top exited on its own within 10 s)."""
        os.write(self.master, b"q")
        try:
            self.proc.wait(10)
            quit_ok = True
        except subprocess.TimeoutExpired:
            quit_ok = False
        return self.stop(), quit_ok

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.thread.join(5)
        os.close(self.master)
        return b"".join(self.chunks).decode("utf-8", "replace")


def _events(run, member, name):
    return [e for e in read_events(run / "logs" / f"{member}.jsonl") if e.get("event") == name]


@pytest.fixture(scope="module")
def resumed_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("resume") / "run"
    lo, hi = free_port_range()
    # a target CartPole cannot reach: the first part ends by SIGTERM only (DQN may
    # well reach 475 before STOP_AT is seen in the learner's metrics)
    first = _start(run, lo, hi, "--run-dir", str(run), target=1000.0)
    wait_for(lambda: (run / "logs").is_dir(), 60, what="the run folder")
    top = TopCapture(run)  # the dashboard follows the live job meanwhile
    top_text, killed, top_quit = "", {}, False
    try:
        # kill -9 the shard once a periodic snapshot holds data; it must come back with it
        snap = wait_for(lambda: [e for e in _events(run, "replay-0", "replay_snapshot")
                                 if e["size"] >= 500][-1:], 240,
                        what="a snapshot of at least 500 transitions")[0]
        n_restored = len(_events(run, "replay-0", "replay_restored"))
        kill_member(run, "replay-0")
        killed = {"snapshot": snap, "n_restored": n_restored}

        def steps():
            m = _events(run, "learner-0", "metrics")
            return m and m[-1]["learner/env_steps"] >= STOP_AT
        wait_for(steps, 240, what=f"learner past {STOP_AT} env steps")
        top_text, top_quit = top.quit()
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=120)
    finally:
        if not top_text:
            top_text = top.stop()
        kill_tree(first)
    stopped = {"rc": first.returncode,
               "ckpt": _events(run, "learner-0", "checkpoint_saved")[-1],
               "snapshot": _events(run, "replay-0", "replay_snapshot")[-1],
               "learner_stop": _events(run, "learner-0", "metrics")[-1]}
    n_restored = len(_events(run, "replay-0", "replay_restored"))
    t_second = time.time()
    # the resumed part only has to train on and end: a few evaluations' worth
    second = _start(run, lo, hi, "--resume", str(run), "--set", "training.total_timesteps=12000")
    try:
        out, err = second.communicate(timeout=600)
    finally:
        kill_tree(second)
    return {"run": run, "stopped": stopped, "killed": killed, "rc": second.returncode,
            "stderr": err, "top": top_text, "top_quit": top_quit,
            "n_restored_before_resume": n_restored,
            "t_second": t_second}


@pytest.mark.timeout(900)
def test_sigterm_then_resume_continues_counters_and_keeps_the_buffer(resumed_run):
    r, st = resumed_run, resumed_run["stopped"]
    run = r["run"]
    assert st["rc"] == 130  # interrupted, every role stopped cleanly
    assert st["ckpt"]["env_steps"] >= STOP_AT and st["snapshot"]["size"] > 0
    resumed = [e for e in _events(run, "learner-0", "resumed") if e["ts"] > r["t_second"]]
    assert resumed, "the learner did not load latest.pt"
    res = resumed[0]
    assert res["env_steps"] == st["ckpt"]["env_steps"] >= STOP_AT
    assert res["version"] == st["ckpt"]["version"] > 0 and res["updates"] > 0
    restored = _events(run, "replay-0", "replay_restored")[r["n_restored_before_resume"]:]
    assert restored[0]["size"] >= 0.99 * st["snapshot"]["size"]
    # counters continue: after the resume nothing restarts from zero
    stamp = res["ts"]
    later = [e for e in _events(run, "learner-0", "metrics") if e["ts"] > stamp]
    assert later and min(e["learner/env_steps"] for e in later) >= res["env_steps"]
    assert min(e["learner/policy_version"] for e in later) >= res["version"]


@pytest.mark.timeout(900)
def test_a_killed_shard_is_restarted_from_its_snapshot(resumed_run):
    run, k = resumed_run["run"], resumed_run["killed"]
    restarts = [e for e in read_events(run / "logs" / "launcher.jsonl")
                if e.get("event") == "role_restarted" and e.get("member") == "replay-0"]
    assert restarts, "the launcher did not restart the killed shard"
    after = _events(run, "replay-0", "replay_restored")[k["n_restored"]:]
    assert after and after[0]["size"] >= k["snapshot"]["size"]


@pytest.mark.timeout(900)
def test_the_resumed_job_trains_on_and_ends_cleanly(resumed_run):
    r = resumed_run
    assert r["rc"] == 0, r["stderr"][-2000:]
    summary = json.loads((r["run"] / "summary.json").read_text())
    assert summary["status"] == "done", summary
    evals = [e for e in _events(r["run"], "evaluator-0", "evaluated")]
    after = [e for e in evals if e["ts"] > r["t_second"]]
    assert after, "nothing was evaluated after the resume"
    # what was evaluated is the resumed policy (its version goes on from the checkpoint's),
    # not a fresh one: well above a random CartPole policy's ~22. (Not compared with the
    # first part's evaluations: DQN's return goes up and down, and the first evaluation
    # may already be of a trained policy.)
    assert min(e["version"] for e in after) >= r["stopped"]["ckpt"]["version"]
    assert max(e["eval/return_mean"] for e in after) > 50.0, after


@pytest.mark.timeout(900)
def test_verl_top_shows_every_role_and_rising_env_steps(resumed_run):
    text = resumed_run["top"]
    plan = json.loads((resumed_run["run"] / "plan.json").read_text())
    for p in plan["placements"]:
        assert p["member_id"] in text, (p["member_id"], text[-3000:])
    steps = [int(x.replace(",", "")) for x in re.findall(r"env steps ([\d,]+)", text)]
    assert len(steps) >= 3 and steps[-1] > steps[0], steps


@pytest.mark.timeout(900)
def test_verl_top_quits_on_q_and_by_itself_once_the_run_has_ended(resumed_run):
    assert resumed_run["top_quit"], resumed_run["top"][-2000:]
    top = TopCapture(resumed_run["run"])  # the run is over: its summary.json is written
    try:
        top.proc.wait(15)
    finally:
        text = top.stop()
    assert top.proc.returncode == 0, text[-2000:]
    assert "ended" in text


@pytest.mark.timeout(900)
def test_tensorboard_events_hold_the_eval_series(resumed_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tb = resumed_run["run"] / "tb"
    assert list(tb.glob("events.out.tfevents.*"))
    ea = EventAccumulator(str(tb))
    ea.Reload()
    evals = ea.Scalars("eval/return_mean")
    assert evals and max(e.value for e in evals) == pytest.approx(max(
        e["eval/return_mean"] for e in _events(resumed_run["run"], "evaluator-0", "evaluated")),
        rel=1e-6)  # charted as float32
    assert [e.step for e in evals] == sorted(e.step for e in evals)
    # each evaluation charted once, though the resumed launcher read the first run's logs
    logged = _events(resumed_run["run"], "evaluator-0", "evaluated")
    assert len(evals) == len(logged)
    assert {"learner/env_steps", "sampler/env_steps_per_s", "replay/size"} <= set(
        ea.Tags()["scalars"])


@pytest.mark.timeout(900)
def test_verl_plot_draws_two_runs(resumed_run, cartpole_run, tmp_path):
    out = tmp_path / "curve.png"
    r = verl_here("plot", str(resumed_run["run"]), str(cartpole_run["run"]), "-o", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000


@pytest.mark.timeout(900)
def test_verl_runs_lists_and_compares_two_runs(resumed_run, cartpole_run, tmp_path_factory):
    a, b = resumed_run["run"], cartpole_run["run"]
    r = verl_here("runs", str(tmp_path_factory.getbasetemp()))
    assert r.returncode == 0, r.stderr
    for run in (a, b):
        best = json.loads((run / "summary.json").read_text())["best_eval_return"]
        line = next(x for x in r.stdout.splitlines()
                    if x.startswith(str(run.relative_to(tmp_path_factory.getbasetemp()))))
        assert f"{best:,.1f}" in line, (line, best)
    r = verl_here("runs", "--compare", str(a), str(b))
    assert r.returncode == 0, r.stderr
    algo = next(x for x in r.stdout.splitlines() if x.startswith("algorithm.name "))
    assert '"dqn"' in algo and '"ppo"' in algo
    assert "result: best_eval_return" in r.stdout
