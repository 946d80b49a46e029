"""TensorBoard event files for a run, written from its logs (the `tensorboard`
extra; no torch or TensorFlow needed): the scalars `scalars.ScalarStream` makes
of them, against env steps, and the resolved job as text. The launcher's
`tracking.Tracking` runs one beside the job."""

from __future__ import annotations

import time
from pathlib import Path

from ..log import write_failed
from .scalars import Scalar


def available() -> bool:
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        return False
    return True


class TBWriter:
    """Appends a run's scalars (its owner's `ScalarStream` made them from the new
    log events) to `tb/`."""

    def __init__(self, run_dir: Path, job_text: str = ""):
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self.writer = EventFileWriter(str(run_dir / "tb"))
        if job_text:
            self._text("job", f"```toml\n{job_text}\n```")

    def write(self, rows: list[Scalar]) -> None:
        for x in rows:
            self._scalar(x.tag, x.value, x.step, x.ts)
        self.writer.flush()

    def _scalar(self, tag: str, value, step: int, ts) -> None:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary

        if not isinstance(value, int | float) or isinstance(value, bool):
            return
        summary = Summary(value=[Summary.Value(tag=tag, simple_value=float(value))])
        self.writer.add_event(Event(wall_time=ts or time.time(), step=step, summary=summary))

    def histograms(self, ev: dict) -> None:
        """A learner's `histograms` event (learning/histograms.py): each histogram
        under `<name>/<member>` and each weight array's norm under
        `weights/<member>/<array>`, at its env steps."""
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import HistogramProto, Summary

        member, step, ts = ev.get("id", "?"), int(ev.get("env_steps", 0)), ev.get("ts")
        values = []
        for name, h in (ev.get("hist") or {}).items():
            try:
                proto = HistogramProto(min=h["min"], max=h["max"], num=h["num"], sum=h["sum"],
                                       sum_squares=h["sum_squares"], bucket_limit=h["limits"],
                                       bucket=h["counts"])
            except (KeyError, TypeError, ValueError):
                continue  # not one of ours
            values.append(Summary.Value(tag=f"{name}/{member}", histo=proto))
        if values:
            self.writer.add_event(Event(wall_time=ts or time.time(), step=step,
                                        summary=Summary(value=values)))
        for name, norm in (ev.get("norms") or {}).items():
            self._scalar(f"weights/{member}/{name}", norm, step, ts)

    def _text(self, tag: str, text: str) -> None:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
        from tensorboard.compat.proto.tensor_pb2 import TensorProto
        from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto

        meta = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="text"))
        tensor = TensorProto(dtype="DT_STRING", string_val=[text.encode()],
                             tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)]))
        self.writer.add_event(Event(wall_time=time.time(), step=0, summary=Summary(
            value=[Summary.Value(tag=tag, metadata=meta, tensor=tensor)])))

    def close(self, rows: list[Scalar] | None = None) -> None:
        self.write(rows or [])
        self.writer.close()


STARTED = ("sampling_started", "first_update")  # the job runs: the writer is made
MADE_AFTER_S = 10.0  # and at the latest this long after its owner was


class Charts:
    """The launcher's TensorBoard writer, made once the job runs: its import takes
    0.3 s of a core, which the roles' start would wait for. Until then (a first env
    step or update seen, `MADE_AFTER_S`, or the end) the scalars are kept, and
    written when it is made. A full disk ends the charts, never the job."""

    def __init__(self, run_dir: Path, job_text: str, log):
        self.run_dir, self.job_text, self.log = run_dir, job_text, log
        self.t0 = time.monotonic()
        self.writer: TBWriter | None = None
        self.pending: list[Scalar] | None = [] if available() else None
        self.pending_hist: list[dict] = []  # histograms events before the writer

    def write(self, events: list[dict], rows: list[Scalar], final: bool = False) -> None:
        """New log events (they say whether the job runs yet) and the scalars made of
        them."""
        hist = [e for e in events if e.get("event") == "histograms"]
        if self.pending is not None:
            self.pending.extend(rows)  # none held a start before: it would have been made
            self.pending_hist.extend(hist)
            started = any(e.get("event") in STARTED for e in events)
            if not (final or started or time.monotonic() - self.t0 >= MADE_AFTER_S):
                return
            rows, self.pending = self.pending, None
            hist, self.pending_hist = self.pending_hist, []
            try:
                self.writer = TBWriter(self.run_dir, self.job_text)
            except Exception as e:  # never fail a job over its charts
                self.log.warning("tensorboard_unavailable", error=str(e))
        if self.writer is None:
            return
        try:
            for ev in hist:
                self.writer.histograms(ev)
            if final:
                self.writer.close(rows)
            else:
                self.writer.write(rows)
        except OSError as e:  # a full disk: no more charts, the job goes on
            write_failed(self.log, "tensorboard_failed", self.run_dir / "tb", e,
                         "no more TensorBoard events")
            self.writer = None
