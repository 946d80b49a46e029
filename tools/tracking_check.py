#!/usr/bin/env python
"""The main job tracked in MLflow and Weights & Biases, read back (the `tracking`
extra), in one invocation:

1. a real `mlflow server` on loopback (an SQLite store in a temporary folder);
2. configs/cartpole_ppo.toml with `logging.backends = ["tensorboard", "mlflow",
   "wandb"]`: what MLflow's client lists for the run (status, params, tags, the
   evaluation curve, artifacts), and the W&B offline run read back from the run
   folder (`verl_zmq.ops.wandb_offline`);
3. the same job again with the server killed (SIGKILL) once the job trains: the
   warnings the terminal showed, the exit code and the summary's status.

    python tools/tracking_check.py
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: tools.*
from tools.harness import ROOT, events, free_ports, http_ok, poll, start  # noqa: E402

JOB = ROOT / "configs" / "cartpole_ppo.toml"
MLFLOW = str(Path(sys.executable).with_name("mlflow"))


def server(d: Path) -> tuple[subprocess.Popen, str]:
    port = free_ports()[0]
    proc = subprocess.Popen(
        [MLFLOW, "server", "--backend-store-uri", f"sqlite:///{d / 'db.sqlite'}",
         "--artifacts-destination", str(d / "artifacts"), "--host", "127.0.0.1",
         "--port", str(port), "--workers", "1"],
        cwd=d, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"

    if not poll(lambda: http_ok(f"{uri}/health"), 120):
        sys.exit("mlflow server did not start within 120 s")
    return proc, uri


def kill(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


def tracked(run: Path, uri: str) -> None:
    from mlflow.tracking import MlflowClient

    from verl_zmq.ops.wandb_offline import finished, history, offline_runs

    ids = json.loads((run / "tracking.json").read_text())
    c = MlflowClient(uri)
    r = c.get_run(ids["mlflow"])
    curve = sorted((m.step, m.value) for m in c.get_metric_history(ids["mlflow"],
                                                                    "eval/return_mean"))
    print(f"MLflow run {ids['mlflow']}: status {r.info.status}, experiment "
          f"{c.get_experiment(r.info.experiment_id).name!r}, {len(r.data.params)} params "
          f"(algorithm.name = {r.data.params.get('algorithm.name')}), "
          f"{len(r.data.metrics)} metric keys, tags {sorted(r.data.tags)}")
    print(f"  eval/return_mean: {len(curve)} points, {curve[:3]} ... {curve[-2:]}")
    print(f"  artifacts: {sorted(a.path for a in c.list_artifacts(ids['mlflow']))}")
    for w in offline_runs(run):
        rows = history(w)
        evals = [(x["env_steps"], x["eval/return_mean"]) for x in rows if "eval/return_mean" in x]
        print(f"W&B offline run {w.parent.relative_to(run)}: exit record {finished(w)}, "
              f"{len(rows)} rows, eval/return_mean at {len(evals)} steps, last {evals[-1:]}")
    evs = [e for e in events(run / "logs" / "evaluator-0.jsonl") if e.get("event") == "evaluated"]
    print(f"evaluator's own log: {len(evs)} evaluations, last "
          f"{(evs[-1]['env_steps'], evs[-1]['eval/return_mean']) if evs else None}")


def main() -> None:
    backends = 'logging.backends=["tensorboard", "mlflow", "wandb"]'
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        (tmp / "m1").mkdir()
        proc, uri = server(tmp / "m1")
        try:
            t0 = time.monotonic()
            p = start(JOB, tmp / "run1", [backends, f'logging.mlflow_uri="{uri}"',
                                          'experiment.project="tracking-check"',
                                          'experiment.tags=["main-job", "tracked"]'],
                      capture=True)
            out, err = p.communicate(timeout=900)
            print(f"== 1. the main job, tracked: exit {p.returncode} in "
                  f"{time.monotonic() - t0:.0f} s, "
                  f"status {json.loads((tmp / 'run1' / 'summary.json').read_text())['status']}")
            tracked(tmp / "run1", uri)
        finally:
            kill(proc)

        (tmp / "m2").mkdir()
        proc, uri = server(tmp / "m2")
        run = tmp / "run2"
        p = start(JOB, run, [backends, f'logging.mlflow_uri="{uri}"'], capture=True)

        def training() -> bool:
            return any(e.get("event") == "tracking_started" and e.get("backend") == "mlflow"
                       for e in events(run / "logs" / "launcher.jsonl")) and any(
                e.get("event") == "evaluated" for e in events(run / "logs" / "evaluator-0.jsonl"))

        poll(training, 300)
        kill(proc)
        killed = time.time()
        out, err = p.communicate(timeout=900)
        said = [ln for ln in err.splitlines() if ln.startswith("warning:") and "tracking" in ln]
        summary = json.loads((run / "summary.json").read_text())
        failed = [e for e in events(run / "logs" / "launcher.jsonl")
                  if e.get("event") == "tracking_failed"]
        print(f"\n== 2. the MLflow server killed mid-run: exit {p.returncode}, status "
              f"{summary['status']}, final eval {summary['final_eval_return']}; "
              f"warnings on the terminal about tracking: {len(said)}")
        for ln in said:
            print(f"  {ln[:220]}")
        if failed:
            print(f"  the warning came {failed[0]['ts'] - killed:.1f} s after the kill")


if __name__ == "__main__":
    main()
