"""`verl sweep`: a space file's mistakes named before anything runs; a small sweep
of real CartPole jobs, two at a time, that writes its study, table, best job and
plot, and resumes where it stopped (a trial left running by a stop recorded as
failed); trials whose jobs fail are recorded as failed and the sweep goes on."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import CONFIGS, ROOT
from verl_zmq.config import ConfigError
from verl_zmq.ops.sweep_space import load_space

JOB = CONFIGS / "cartpole_ppo.toml"
SHORT = ["training.total_timesteps=4000", "evaluation.interval_steps=2000",
         "evaluation.n_eval_episodes=2", "evaluation.confirm_best=false",
         "checkpoint.interval_steps=100000"]


def _space(tmp_path, text: str):
    p = tmp_path / "space.toml"
    p.write_text(text)
    return p


@pytest.mark.parametrize("text, said", [
    ("[space]\nalgorithm.params.learnin_rate = {low = 1e-4, high = 1e-2}\n",
     "space.algorithm.params.learnin_rate"),
    ("[space]\nalgorithm.params.learning_rate = {low = 1e-2, high = 1e-4}\n",
     "must be below high"),
    ("[space]\nalgorithm.params.learning_rate = {low = 0.0, high = 1e-2, log = true}\n",
     "a log range needs low > 0"),
    ("[space]\nalgorithm.params.batch_size = {choices = [256, -3]}\n",
     "space.algorithm.params.batch_size = -3"),
    ("[space]\nalgorithm.params.ent_coef = {low = 0.0, high = 0.1}\n"
     "[objective]\nmetric = \"steps_to_target\"\n", "objective.target"),
    ("[space]\n", "[space] names no parameter"),
    ("[space]\nalgorithm.params.ent_coef = 0.1\n", "expected a table"),
])
def test_a_space_files_mistakes_are_named_with_the_file_and_key(tmp_path, text, said):
    path = _space(tmp_path, text)
    with pytest.raises(ConfigError, match=str(path)) as e:
        load_space(path, JOB)
    assert said in str(e.value), str(e.value)


def _best_return_space(tmp_path, *params: str):
    """A space of these parameter lines, scored by the best evaluation."""
    return _space(tmp_path, "[space]\n" + "".join(f"{p}\n" for p in params)
                  + "[objective]\nmetric = \"best_return\"\n")


def _study(out):
    import optuna

    return optuna.load_study(study_name="sweep", storage=f"sqlite:///{out / 'study.db'}")


def _sweep(space, out, trials, *extra):
    argv = [sys.executable, "-m", "verl_zmq.cli", "sweep", str(JOB), str(space), "--out",
            str(out), "--trials", str(trials), "--parallel", "2", "--pruner", "none",
            *[x for s in SHORT for x in ("--set", s)], *extra]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=280)


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_a_sweep_of_real_jobs_reports_and_resumes(tmp_path):
    space = _best_return_space(
        tmp_path, "algorithm.params.learning_rate = {low = 5e-4, high = 5e-3, log = true}",
        "algorithm.params.batch_size = {choices = [256, 512]}")
    out = tmp_path / "sweep"
    r = _sweep(space, out, 2)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "running 2 more, 2 at a time" in r.stdout
    assert "trial 0: " in r.stdout and "the job's own values)" in r.stdout  # the baseline
    # a stop that left a trial running: the resumed sweep records it as failed
    study = _study(out)
    study.ask()
    r = _sweep(space, out, 4)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "sweep: 3 trials in" in r.stdout and "running 1 more" in r.stdout
    study = _study(out)
    states = [t.state.name for t in study.trials]
    assert states.count("COMPLETE") == 3 and states.count("FAIL") == 1, states
    for t in study.trials:
        if t.state.name == "COMPLETE":
            assert 0 < t.value <= 500 and (out / "trials" / f"trial-{t.number:03d}").is_dir()
    assert (out / "best.toml").read_text().startswith(f"# verl sweep: trial "
                                                     f"{study.best_trial.number}")
    assert (out / "sweep.png").stat().st_size > 10_000
    assert len((out / "trials.csv").read_text().splitlines()) == 5
    assert "| trial | state | objective | learning_rate | batch_size |" in r.stdout


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_trials_whose_jobs_fail_are_recorded_and_the_sweep_goes_on(tmp_path):
    space = _best_return_space(tmp_path, 'environment.id = {choices = ["tests.nowhere:NoEnv"]}')
    out = tmp_path / "sweep"
    r = _sweep(space, out, 2)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    study = _study(out)
    assert [t.state.name for t in study.trials] == ["FAIL", "FAIL"]
    assert "no trial completed" in r.stdout
    # each failed trial keeps its job's own error: the env that cannot be made
    assert all("tests.nowhere" in t.user_attrs["error"] for t in study.trials), \
        [t.user_attrs for t in study.trials]


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_ctrl_c_stops_the_trials_jobs_and_records_them(tmp_path):
    import signal

    from tests.conftest import job_processes, poll

    # (a range without the job's own value: no baseline trial runs alone first)
    space = _best_return_space(
        tmp_path, "algorithm.params.learning_rate = {low = 3e-3, high = 5e-3, log = true}")
    out = tmp_path / "sweep"
    argv = [sys.executable, "-m", "verl_zmq.cli", "sweep", str(JOB), str(space), "--out",
            str(out), "--trials", "4", "--parallel", "2", "--set",
            "training.total_timesteps=1000000"]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert poll(lambda: len(list((out / "trials").glob("trial-*/logs/learner-0.jsonl")))
                    >= 2, 120), "two trials did not start"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "run the same command to go on" in err
    assert poll(lambda: not job_processes(str(out)), 30), job_processes(str(out))
    study = _study(out)
    assert [t.state.name for t in study.trials] == ["FAIL", "FAIL"]


def test_a_second_sweep_on_the_same_study_is_refused(tmp_path):
    from verl_zmq.ops.sweep import _hold

    out = tmp_path / "sweep"
    held = _hold(out)  # a sweep running there
    space = _best_return_space(tmp_path, "algorithm.params.ent_coef = {low = 0.0, high = 0.1}")
    r = _sweep(space, out, 1)
    held.close()
    assert r.returncode != 0 and f"another sweep runs on {out}" in r.stderr, r.stderr[-1000:]
    assert str(os.getpid()) in r.stderr  # the holder's pid
