"""A warm spare follows the trainer it stands in for.

While it waits for the job on its stdin, a trainer's spare (a learner or a DAPO
peer) asks the registry for its member's params endpoint and subscribes to it,
keeping the newest params message: the policy's weights (the critic with them
where the policy module holds it), the observation statistics, the version, the
env-step and update counts. When it takes over, the role resumes from its
latest.pt snapshot (optimiser, critic, RNG) and then takes these params where
they are newer, so a takeover continues from the killed trainer's last
published version instead of the snapshot's, a few updates older.

Best effort and torch-free: no keys file in the run folder (a remote host's
holds none; a job with `security.curve = false` writes none), no registry answer,
no params: the spare resumes from the snapshot as before.
The thread reads at the spare's own (idle) priority and keeps only the newest
message, so a spare starved of CPU falls behind but never holds up the trainer
(the trainer's PUB drops what a full pipe cannot take).
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Any

import zmq

from . import wire
from .comm.transport import CurveKeys, Transport
from .config.wiring import SPARE_PARAMS, SPARE_REGISTRY

ASK_EVERY_S = 1.0  # how often the registry is asked while the endpoint is unknown
HEARTBEAT_S, DEAD_AFTER_S = 1.0, 3.0  # the job's defaults: the job is not known yet


class Follower:
    """Subscribes to `member_id`'s params (found through the registry) in a thread;
    `stop()` returns the newest message received, or None."""

    def __init__(self, registry: str, member_id: str, run_dir: str | None):
        self.registry = registry
        self.member_id = member_id
        self.keys = _keys(run_dir)
        self.latest: wire.Params | None = None
        self.received = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="follow", daemon=True)

    def start(self) -> Follower:
        self._thread.start()
        return self

    def stop(self) -> wire.Params | None:
        self._stop.set()
        # not waiting long: an idle-priority thread on a busy machine may be slow to
        # wake, and the newest message it kept is already there to take
        self._thread.join(timeout=0.2)
        return self.latest

    def _run(self) -> None:
        if self.keys is None:  # a plain connection to a CURVE job would be refused,
            return  # and logged as a stranger's: without keys, the snapshot alone
        ctx = zmq.Context()
        t = Transport(ctx, keys=self.keys, heartbeat_s=HEARTBEAT_S,  # type: ignore[arg-type]
                      dead_after_s=DEAD_AFTER_S)
        try:
            endpoint = self._endpoint(t)
            if endpoint is None:
                return
            # a plain (not asyncio) context: this socket is synchronous, whatever the
            # Transport's annotations say of its asyncio sockets
            sub: Any = t.connect_edge(SPARE_PARAMS, endpoint)
            sub.setsockopt(zmq.SUBSCRIBE, b"")
            while not self._stop.is_set():
                if sub.poll(100):
                    self._take(sub.recv_multipart(copy=False))
        except zmq.ZMQError:
            return  # the spare resumes from the snapshot alone
        finally:
            t.close()
            ctx.term()

    def _endpoint(self, t: Transport) -> str | None:
        """The member's params endpoint as the registry knows it (None: stopped first)."""
        dealer: Any = t.connect_edge(SPARE_REGISTRY, self.registry)  # synchronous
        try:
            while not self._stop.is_set():
                dealer.send_multipart(wire.encode(wire.SnapshotRequest(src=self.member_id)))
                if dealer.poll(int(ASK_EVERY_S * 1000)):
                    with contextlib.suppress(wire.WireError):
                        msg = wire.decode(dealer.recv_multipart(copy=False))
                        if isinstance(msg, wire.MembershipSnapshot):
                            for m in msg.members:
                                if m.id == self.member_id and SPARE_PARAMS.endpoint_of(m):
                                    return SPARE_PARAMS.endpoint_of(m)
                self._stop.wait(ASK_EVERY_S)
            return None
        finally:
            t.close_socket(dealer)

    def _take(self, frames: list[Any]) -> None:
        try:
            msg = wire.decode(frames)
        except wire.WireError:
            return  # counted nowhere: the role's own sockets count what matters
        if isinstance(msg, wire.Params) and msg.src == self.member_id and (
                self.latest is None or msg.version >= self.latest.version):
            self.latest = msg
            self.received += 1


def _keys(run_dir: str | None) -> CurveKeys | None:
    """The job's keys from the run folder (the launcher writes keys.json there)."""
    if not run_dir:
        return None
    try:
        return CurveKeys.load(Path(run_dir) / "keys.json")
    except (OSError, ValueError):
        return None
