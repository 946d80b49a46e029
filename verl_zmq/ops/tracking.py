"""Experiment tracking beside TensorBoard: MLflow and Weights & Biases
(`logging.backends`, the `tracking` extra), fed by the launcher from the run's
logs like the TensorBoard charts (`scalars.ScalarStream`).

Each backend receives every metric against its env step, the job's keys as
params, `experiment.project` and `tags`, and at the end the job file,
summary.json, the curve (PNG) and the best checkpoint(s) as artifacts. A
backend runs in a thread of its own behind a bounded queue, so a slow or dead
server never holds the launcher: its first failure is one warning, the backend
is off for the rest of the run, and the job goes on. The tracked run's id is
kept in the run folder (`tracking.json`), so a resumed run continues it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..config import Job
from ..config.writing import job_to_dict
from .runs import flatten
from .runview import RunView
from .scalars import Scalar, ScalarStream

QUEUE_BATCHES = 512  # batches of scalars a backend may fall behind before they are dropped
FINISH_S = 60.0  # a backend's last writes (artifacts) before the launcher gives up on it
WANDB_FLUSH_S = 15.0  # how long an offline W&B run's last records may take to be written
IDS_FILE = "tracking.json"  # the tracked runs' ids: a resumed run continues them
_MLFLOW_KEY = re.compile(r"[^A-Za-z0-9_\-. /]")  # what MLflow refuses in a key


class Sink(Protocol):
    """One tracking backend, driven from its own thread."""

    name: str

    def open(self, saved_id: str) -> str:
        """Start (or, with a saved id, continue) the tracked run; its id."""
        ...

    def scalars(self, rows: list[Scalar]) -> None: ...

    def finish(self, artifacts: list[Artifact], ok: bool) -> None: ...


Artifact = tuple[Path, str]  # a file, and the folder it goes to in the tracked run ("": top)


@dataclass(frozen=True)
class RunInfo:
    """What every backend is told about the run."""

    run_dir: Path
    project: str
    run_name: str
    tags: list[str]
    params: dict[str, str]


class MLflowSink:
    """An MLflow run (MlflowClient: a server's http:// URI, a database, or a folder)."""

    name = "mlflow"

    def __init__(self, info: RunInfo, uri: str):
        self.info = info
        self.uri = uri or os.environ.get("MLFLOW_TRACKING_URI", "") \
            or f"sqlite:///{info.run_dir.resolve() / 'mlflow.db'}"
        self.client: Any = None
        self.run_id = ""

    def open(self, saved_id: str) -> str:
        # a dead server answers within seconds, not after MLflow's 7 retries
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
        for name in ("mlflow", "alembic"):  # their INFO lines are not the job's
            logging.getLogger(name).setLevel(logging.WARNING)
        from mlflow.entities import Param, RunTag
        from mlflow.tracking import MlflowClient

        self.client = c = MlflowClient(tracking_uri=self.uri)
        if saved_id:
            self.run_id = c.get_run(saved_id).info.run_id
            c.update_run(self.run_id, status="RUNNING")
            return self.run_id
        exp = c.get_experiment_by_name(self.info.project)
        exp_id = exp.experiment_id if exp else c.create_experiment(self.info.project)
        tags = {"mlflow.runName": self.info.run_name, "verl.run_dir": str(self.info.run_dir),
                **{t: "true" for t in self.info.tags}}
        self.run_id = c.create_run(exp_id, run_name=self.info.run_name, tags=tags).info.run_id
        params = [Param(_MLFLOW_KEY.sub("_", k)[:250], v[:6000])
                  for k, v in self.info.params.items()]
        for i in range(0, len(params), 100):  # MLflow's batch limit
            c.log_batch(self.run_id, params=params[i:i + 100])
        c.log_batch(self.run_id, tags=[RunTag("verl.tags", ",".join(self.info.tags))])
        return self.run_id

    def scalars(self, rows: list[Scalar]) -> None:
        from mlflow.entities import Metric

        now = time.time()
        metrics = [Metric(_MLFLOW_KEY.sub("_", r.tag), r.value, int(1000 * (r.ts or now)),
                          r.step) for r in rows]
        for i in range(0, len(metrics), 1000):
            self.client.log_batch(self.run_id, metrics=metrics[i:i + 1000])

    def finish(self, artifacts: list[Artifact], ok: bool) -> None:
        for path, folder in artifacts:
            self.client.log_artifact(self.run_id, str(path), folder or None)
        self.client.set_terminated(self.run_id, "FINISHED" if ok else "FAILED")


class WandbSink:
    """A Weights & Biases run; offline by default, written to the run folder's
    wandb/ for `wandb sync` later (no network at run time)."""

    name = "wandb"

    def __init__(self, info: RunInfo, mode: str):
        self.info, self.mode = info, mode
        self.run: Any = None

    def open(self, saved_id: str) -> str:
        os.environ.setdefault("WANDB_SILENT", "true")
        import wandb

        self.run = wandb.init(
            project=self.info.project, name=self.info.run_name, dir=str(self.info.run_dir),
            mode=self.mode, config=self.info.params, tags=self.info.tags,
            id=saved_id or None, resume="allow" if saved_id else None,
            # no console capture and no system monitor: the launcher's terminal is
            # the job's, and its cores are the roles'
            settings=wandb.Settings(silent=True, console="off", x_disable_stats=True))
        self.run.define_metric("env_steps")
        self.run.define_metric("*", step_metric="env_steps")
        return str(self.run.id)

    def scalars(self, rows: list[Scalar]) -> None:
        # one W&B row per run of scalars at one env step; a key seen again (two
        # evaluations at one step) starts the next row, so no value is lost
        row: dict[str, float] = {}
        step = None
        for r in rows:
            if row and (r.step != step or r.tag in row):
                self.run.log({**row, "env_steps": step})
                row = {}
            row[r.tag], step = r.value, r.step
        if row:
            self.run.log({**row, "env_steps": step})

    def finish(self, artifacts: list[Artifact], ok: bool) -> None:
        import wandb

        art = wandb.Artifact(f"run-{self.run.id}", type="run")
        for path, folder in artifacts:
            art.add_file(str(path), name=f"{folder}/{path.name}" if folder else path.name)
        self.run.log_artifact(art)
        self.run.finish(exit_code=0 if ok else 1)
        wandb.teardown()
        # W&B's service may still be writing the run's last records: wait (bounded)
        # for its exit record, so the run folder is whole once the launcher ends
        from .wandb_offline import finished

        path = Path(self.run.dir).parent / f"run-{self.run.id}.wandb"
        deadline = time.monotonic() + WANDB_FLUSH_S
        while self.mode == "offline" and not finished(path) and time.monotonic() < deadline:
            time.sleep(0.2)


_FINISH = object()


class TrackerThread:
    """One backend in a thread of its own, fed through a bounded queue."""

    def __init__(self, sink: Sink, saved_id: str, failed: Callable[[str, str, str], None],
                 opened: Callable[[str, str], None]):
        self.sink, self.saved_id, self.failed, self.opened = sink, saved_id, failed, opened
        self.q: queue.Queue[Any] = queue.Queue(maxsize=QUEUE_BATCHES)
        self.dead = False
        self.dropped = 0  # scalars not sent: the backend fell that far behind
        # started with the first metrics: its imports (MLflow's take seconds of a core)
        # then no longer compete with the roles' start
        self.thread = threading.Thread(target=self._run, name=f"tracking-{sink.name}",
                                       daemon=True)

    def put(self, rows: list[Scalar]) -> None:
        if self.dead or not rows:
            return
        if self.thread.ident is None:
            self.thread.start()
        try:
            self.q.put_nowait(rows)
        except queue.Full:
            self.dropped += len(rows)

    def finish(self, artifacts: list[Artifact], ok: bool, deadline_s: float = FINISH_S
               ) -> bool:
        """Hand over the artifacts and wait (bounded) for the last writes; False
        when the backend did not finish in time."""
        if self.thread.ident is None:  # no metrics came: the tracked run still ends
            self.thread.start()
        if not self.dead:
            with contextlib.suppress(queue.Full):
                self.q.put((_FINISH, artifacts, ok), timeout=deadline_s)
        self.thread.join(deadline_s)
        return not self.thread.is_alive()

    def _run(self) -> None:
        what = "start"
        try:
            self.opened(self.sink.name, self.sink.open(self.saved_id))
            while True:
                item = self.q.get()
                if isinstance(item, tuple) and item and item[0] is _FINISH:
                    what = "final artifacts"
                    self.sink.finish(item[1], item[2])
                    return
                what = "metrics"
                self.sink.scalars(item)
        except Exception as e:  # any failure of a backend: said once, the job goes on
            self.dead = True
            self.failed(self.sink.name, what, f"{type(e).__name__}: {e}"[:300])


class Tracking:
    """The launcher's tracking backends, fed the run's new log events: TensorBoard
    (`tb.Charts`, in the launcher's loop), MLflow and W&B (a thread each)."""

    def __init__(self, job: Job, run_dir: Path, job_text: str, view: RunView, log: Any):
        from .tb import Charts

        self.job, self.run_dir, self.log = job, run_dir, log
        self.charts = Charts(run_dir, job_text, log) \
            if "tensorboard" in job.logging.backends else None
        self.stream = ScalarStream(view)
        self.failures: queue.SimpleQueue[tuple[str, str, str]] = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.ids = self._saved_ids()
        info = RunInfo(run_dir, job.experiment.project or job.experiment.name,
                       f"{job.experiment.name}-{run_dir.name}", list(job.experiment.tags),
                       {k: json.dumps(v) if not isinstance(v, str) else v
                        for k, v in flatten(job_to_dict(job)).items()})
        sinks: list[Sink] = []
        if "mlflow" in job.logging.backends:
            sinks.append(MLflowSink(info, job.logging.mlflow_uri))
        if "wandb" in job.logging.backends:
            sinks.append(WandbSink(info, job.logging.wandb_mode))
        self.threads = [TrackerThread(s, self.ids.get(s.name, ""),
                                      lambda *a: self.failures.put(a), self._opened)
                        for s in sinks]

    def _saved_ids(self) -> dict[str, str]:
        with contextlib.suppress(OSError, ValueError):
            d = json.loads((self.run_dir / IDS_FILE).read_text())
            return {str(k): str(v) for k, v in d.items()}
        return {}

    def _opened(self, backend: str, run_id: str) -> None:
        with self.lock:
            self.ids[backend] = run_id
            with contextlib.suppress(OSError):  # a full disk: a resume starts a new run
                tmp = self.run_dir / f".{IDS_FILE}.tmp"
                tmp.write_text(json.dumps(self.ids, indent=1))
                tmp.replace(self.run_dir / IDS_FILE)
        self.log.info("tracking_started", backend=backend, run_id=run_id)

    def write(self, events: list[dict[str, Any]], final: bool = False) -> None:
        """New log events, from the launcher's loop: their scalars, made once,
        charted and sent on to the other backends, never waited for (`final`: the
        job's last)."""
        self._say_failures()
        if self.charts is None and not self.threads:
            return
        rows = self.stream.take(events)
        if self.charts is not None:
            self.charts.write(events, rows, final=final)
        for t in self.threads:
            t.put(rows)

    def finish(self, summary: dict[str, Any]) -> None:
        """After summary.json: the artifacts, then each backend's end (bounded)."""
        if not self.threads:
            return
        artifacts = self._artifacts(summary)
        ok = summary.get("status") == "done"
        for t in self.threads:
            if not t.finish(artifacts, ok):
                self.log.warning("tracking_unfinished", backend=t.sink.name,
                                 why=f"its last writes took over {FINISH_S:g}s; the run "
                                     f"there may lack its artifacts")
            if t.dropped:
                self.log.warning("tracking_dropped", backend=t.sink.name, scalars=t.dropped,
                                 why="the backend fell behind the job; these were not sent")
        self._say_failures()

    def _artifacts(self, summary: dict[str, Any]) -> list[Artifact]:
        rd = self.run_dir
        out: list[Artifact] = [(rd / "job.toml", ""), (rd / "summary.json", "")]
        try:
            from .plot import plot_runs

            out.append((plot_runs([rd], rd / "curve.png"), ""))
        except Exception as e:  # matplotlib missing, or nothing to plot
            self.log.info("tracking_no_curve", error=f"{type(e).__name__}: {e}"[:200])
        # several trained policies: each one's best.pt in a folder of its name
        bests = summary.get("best_checkpoints") or {}
        best = summary.get("best_checkpoint")
        out += [(Path(b), p) for p, b in bests.items()] if bests else \
            [(Path(best), "")] if best else []
        return [(p, f) for p, f in out if p.exists()]

    def _say_failures(self) -> None:
        while True:
            try:
                backend, what, error = self.failures.get_nowait()
            except queue.Empty:
                return
            self.log.warning("tracking_failed", backend=backend, during=what, error=error,
                             why=f"no more goes to {backend} in this run; the job goes on")
