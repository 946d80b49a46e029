"""Experiment tracking (`logging.backends`): a short CartPole job sends its
metrics against env steps, its keys, project and tags, and at the end its job
file, summary, curve and best.pt to a real MLflow server (started here, SQLite
store) and to an offline W&B run in the run folder; a resumed run continues
both tracked runs; an MLflow server nobody answers at costs one warning and the
job still ends done. `verl check` names a backend it does not know."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CONFIGS, ROOT, free_port_range, poll, read_events
from tools.harness import http_ok
from verl_zmq.config import ConfigError, load_job
from verl_zmq.ops.wandb_offline import history, offline_runs

pytestmark = pytest.mark.e2e
JOB = CONFIGS / "cartpole_ppo.toml"
MLFLOW = str(Path(sys.executable).with_name("mlflow"))


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """`mlflow server` on loopback with an SQLite store and artifacts in a temp folder."""
    d = tmp_path_factory.mktemp("mlflow")
    port = free_port_range()[0]
    proc = subprocess.Popen(
        [MLFLOW, "server", "--backend-store-uri", f"sqlite:///{d / 'db.sqlite'}",
         "--artifacts-destination", str(d / "artifacts"), "--host", "127.0.0.1",
         "--port", str(port), "--workers", "1"],
        cwd=d, stdout=subprocess.DEVNULL, stderr=open(d / "server.log", "w"),  # noqa: SIM115
        start_new_session=True)
    uri = f"http://127.0.0.1:{port}"

    def up():  # (or it died: fail below, not after the deadline)
        return http_ok(f"{uri}/health") or proc.poll() is not None

    try:
        assert poll(up, 120) and proc.poll() is None, (d / "server.log").read_text()[-2000:]
        yield uri
    finally:
        with contextlib.suppress(ProcessLookupError):  # the server and its workers
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def _launch(run: Path, *sets: str, resume: bool = False) -> subprocess.CompletedProcess:
    lo, hi = free_port_range()
    argv = [sys.executable, "-m", "launcher", "--resume", str(run)] if resume else \
        [sys.executable, "-m", "launcher", str(CONFIGS / "hosts.local.txt"), str(JOB),
         "--run-dir", str(run)]  # a resume: the run's own job and hosts
    argv += ["--set", f"launch.port_range=[{lo}, {hi}]", "--no-env-check"]
    for s in sets:
        argv += ["--set", s]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=280)


def test_check_names_an_unknown_backend():
    with pytest.raises(ConfigError, match=r"logging.backends: 'neptune' is not a backend"):
        load_job(JOB, ['logging.backends=["tensorboard", "neptune"]'])


def test_a_backend_not_installed_is_named_by_the_launchers_checks_not_the_roles(monkeypatch):
    """Roles load the job without the tracking packages (their hosts may lack them);
    `verl check` and each launch, on the launcher's host, name what is missing."""
    import importlib.util

    from verl_zmq.ops.checks import tracking_problems

    job = load_job(JOB, ['logging.backends=["tensorboard", "wandb"]'])  # a role's load
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "wandb" else real(name, *a))
    assert load_job(JOB, ['logging.backends=["wandb"]']).logging.backends == ["wandb"]
    [why] = tracking_problems(job)
    assert "'wandb' needs the wandb package" in why and "[tracking]" in why


def test_mlflow_and_wandb_receive_the_run_and_a_resume_continues_them(tmp_path,
                                                                       mlflow_server):
    from mlflow.tracking import MlflowClient

    run = tmp_path / "run"
    sets = ['logging.backends=["tensorboard", "mlflow", "wandb"]',
            f'logging.mlflow_uri="{mlflow_server}"', 'experiment.project="tracked"',
            'experiment.tags=["smoke", "cartpole"]', "training.total_timesteps=12000",
            "evaluation.interval_steps=4000", "evaluation.n_eval_episodes=3",
            "checkpoint.interval_steps=4000"]
    r = _launch(run, *sets)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "tracking_failed" not in r.stderr
    ids = json.loads((run / "tracking.json").read_text())
    c = MlflowClient(mlflow_server)
    got = c.get_run(ids["mlflow"])
    assert got.info.status == "FINISHED"
    assert got.data.params["algorithm.name"] == "ppo"
    assert {"smoke", "cartpole"} <= set(got.data.tags)
    assert c.get_experiment(got.info.experiment_id).name == "tracked"
    evals = [e for e in read_events(run / "logs" / "evaluator-0.jsonl")
             if e.get("event") == "evaluated"]
    curve = [(m.step, m.value) for m in c.get_metric_history(ids["mlflow"],
                                                             "eval/return_mean")]
    # every evaluation; the final one may come twice at one step with one value, which
    # MLflow stores once when both fall in one millisecond (its rows' key)
    assert set(curve) == {(e["env_steps"], e["eval/return_mean"]) for e in evals}
    assert c.get_metric_history(ids["mlflow"], "losses/policy_loss")
    arts = {a.path for a in c.list_artifacts(ids["mlflow"])}
    assert {"job.toml", "summary.json", "curve.png", "best.pt"} <= arts, arts
    [wb] = offline_runs(run)
    assert ids["wandb"] in wb.name
    rows = history(wb)
    # every evaluation, as above
    assert {(x["env_steps"], x["eval/return_mean"]) for x in rows
            if "eval/return_mean" in x} == {(e["env_steps"], e["eval/return_mean"])
                                            for e in evals}
    assert any("losses/policy_loss" in x for x in rows)

    # the same run, resumed with a bigger budget: both tracked runs go on
    r = _launch(run, "training.total_timesteps=20000", resume=True)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads((run / "tracking.json").read_text()) == ids
    more = c.get_metric_history(ids["mlflow"], "eval/return_mean")
    assert max(m.step for m in more) > max(s for s, _ in curve)
    assert c.get_run(ids["mlflow"]).info.status == "FINISHED"


def test_an_mlflow_server_nobody_answers_costs_one_warning_not_the_job(tmp_path):
    run = tmp_path / "run"
    dead = f"http://127.0.0.1:{free_port_range()[0]}"  # nothing listens there
    r = _launch(run, 'logging.backends=["mlflow"]', f'logging.mlflow_uri="{dead}"',
                "training.total_timesteps=6000", "evaluation.interval_steps=3000",
                "evaluation.n_eval_episodes=2")
    assert r.returncode == 0, r.stderr[-3000:]
    said = [ln for ln in r.stderr.splitlines() if ln.startswith("warning:")
            and "tracking_failed" in ln]
    assert len(said) == 1 and "mlflow" in said[0], r.stderr[-3000:]
    assert json.loads((run / "summary.json").read_text())["status"] == "done"
    assert not (run / "tb").exists()  # tensorboard was not among the backends
    shutil.rmtree(run, ignore_errors=True)
