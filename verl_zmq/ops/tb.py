"""TensorBoard event files for a run, written from its logs (the `tensorboard`
extra; no torch or TensorFlow needed): the scalars `scalars.ScalarStream` makes
of them, against env steps, and the resolved job as text. The launcher runs one
beside the job."""

from __future__ import annotations

import time
from pathlib import Path

from ..log import write_failed
from .runview import RunView
from .scalars import ScalarStream


def available() -> bool:
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        return False
    return True


class TBWriter:
    """Appends a run's new log events to `tb/`. It shares its owner's `RunView`
    (the owner polls it and hands over what was new; what the logs held before the
    owner's first poll, a resumed run's past charted by the launcher that ran it,
    counts for the state only)."""

    def __init__(self, run_dir: Path, job_text: str = "", view: RunView | None = None):
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        if view is None:
            view = RunView(run_dir)
            view.poll()
        self.view = view
        self.writer = EventFileWriter(str(run_dir / "tb"))
        self.stream = ScalarStream(view)
        if job_text:
            self._text("job", f"```toml\n{job_text}\n```")

    def poll(self) -> None:
        """Read the view's new events (when this writer owns its view) and write them."""
        self.write(self.view.poll())

    def write(self, events: list[dict]) -> None:
        for x in self.stream.take(events):
            self._scalar(x.tag, x.value, x.step, x.ts)
        self.writer.flush()

    def _scalar(self, tag: str, value, step: int, ts) -> None:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary

        if not isinstance(value, int | float) or isinstance(value, bool):
            return
        summary = Summary(value=[Summary.Value(tag=tag, simple_value=float(value))])
        self.writer.add_event(Event(wall_time=ts or time.time(), step=step, summary=summary))

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

    def close(self, events: list[dict] | None = None) -> None:
        self.write(events or [])
        self.writer.close()


STARTED = ("sampling_started", "first_update")  # the job runs: the writer is made
MADE_AFTER_S = 10.0  # and at the latest this long after its owner was


class Charts:
    """The launcher's TensorBoard writer, made once the job runs: its import takes
    0.3 s of a core, which the roles' start would wait for. Until then (a first env
    step or update seen, `MADE_AFTER_S`, or the end) the events are kept, and
    written when it is made. A full disk ends the charts, never the job."""

    def __init__(self, run_dir: Path, job_text: str, view: RunView, log):
        self.run_dir, self.job_text, self.view, self.log = run_dir, job_text, view, log
        self.t0 = time.monotonic()
        self.writer: TBWriter | None = None
        self.pending: list[dict] | None = [] if available() else None

    def write(self, new: list[dict], final: bool = False) -> None:
        if self.pending is not None:
            self.pending.extend(new)  # none held a start before: it would have been made
            started = any(e.get("event") in STARTED for e in new)
            if not (final or started or time.monotonic() - self.t0 >= MADE_AFTER_S):
                return
            new, self.pending = self.pending, None
            try:
                self.writer = TBWriter(self.run_dir, self.job_text, view=self.view)
            except Exception as e:  # never fail a job over its charts
                self.log.warning("tensorboard_unavailable", error=str(e))
        if self.writer is None:
            return
        try:
            if final:
                self.writer.close(new)
            else:
                self.writer.write(new)
        except OSError as e:  # a full disk: no more charts, the job goes on
            write_failed(self.log, "tensorboard_failed", self.run_dir / "tb", e,
                         "no more TensorBoard events")
            self.writer = None
