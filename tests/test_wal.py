"""The replay shard's write-ahead log (verl_zmq/replay/wal.py): what is written
comes back in order from a snapshot's seq on, a record torn by a crash or a gap
ends the replay, and a snapshot's cut drops only the files it holds."""

from __future__ import annotations

import contextlib
import os
import signal
import time

import numpy as np
import pytest

from verl_zmq import wire
from verl_zmq.replay import wal
from verl_zmq.wire.samples import cartpole_fragment


def _frag(i: int) -> wire.Fragment:
    return wire.Fragment(version=i, arrays=cartpole_fragment(T=4, E=2, seed=i))


def _log(tmp_path, n: int, cut_at: tuple[int, ...] = ()) -> wal.WriteAheadLog:
    log = wal.WriteAheadLog(tmp_path)
    for i in range(n):
        if i in cut_at:
            log.cut()
        log.append(wire.encode(_frag(i)))
        if i % 3 == 2:  # written in groups, as the shard does
            log.write(log.take())
    log.write(log.take())
    return log


def test_logged_fragments_come_back_in_order_and_whole(tmp_path):
    _log(tmp_path, 10, cut_at=(4, 7)).close()
    got = list(wal.replay(tmp_path, 0))
    assert [s for s, _ in got] == list(range(10))
    assert len(wal.segments(tmp_path)) == 3
    for seq, frames in got:
        msg = wire.decode(frames)
        want = _frag(seq)
        assert isinstance(msg, wire.Fragment) and msg.version == seq
        for k, v in want.arrays.items():
            np.testing.assert_array_equal(msg.arrays[k], v)
    assert [s for s, _ in wal.replay(tmp_path, 6)] == [6, 7, 8, 9]  # after a snapshot's seq


def test_a_torn_tail_or_a_gap_ends_the_replay(tmp_path):
    _log(tmp_path, 6).close()
    (_, path), = wal.segments(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[:-7])  # the last record cut short by the crash
    assert [s for s, _ in wal.replay(tmp_path, 0)] == [0, 1, 2, 3, 4]
    # a flipped byte inside record 2: its checksum fails, nothing after it is trusted
    torn = bytearray(data)
    head = wal.HEAD.size
    first = head + wal.HEAD.unpack_from(data, 0)[1]
    second = first + head + wal.HEAD.unpack_from(data, first)[1]
    torn[second + head + 3] ^= 0xFF
    path.write_bytes(bytes(torn))
    assert [s for s, _ in wal.replay(tmp_path, 0)] == [0, 1]
    # a snapshot's seq beyond what the log holds: nothing to replay
    assert list(wal.replay(tmp_path, 40)) == []


def test_a_snapshot_drops_the_files_before_its_seq_and_nothing_after(tmp_path):
    log = _log(tmp_path, 5)
    seq = log.cut()  # a snapshot copied the store here
    for i in range(5, 8):
        log.append(wire.encode(_frag(i)))
    log.write(log.take())
    log.append(wire.encode(_frag(8)))  # not written yet when the snapshot lands
    log.drop_before(seq)
    log.write(log.take())
    log.close()
    assert [b for b, _ in wal.segments(tmp_path)] == [5]
    assert [s for s, _ in wal.replay(tmp_path, seq)] == [5, 6, 7, 8]


def test_a_record_that_does_not_add_up_is_refused():
    payload = wal.pack([b"ab", b"cde"])
    assert wal.unpack(payload) == [b"ab", b"cde"]
    with pytest.raises(ValueError):
        wal.unpack(payload[:-1])


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_a_shard_killed_between_snapshots_comes_back_with_every_logged_insert(tmp_path):
    """The DQN job's shard, no periodic snapshot in reach: the samplers are paused
    (so the buffer stops changing), the log written, the shard killed with -9;
    its replacement restores all of it from the log."""
    from tests.conftest import ROOT
    from tools.faults.chaos import Run, wait
    from tools.harness import events

    r = Run(str(ROOT / "configs" / "cartpole_dqn.toml"), tmp_path / "run",
            ["replay.snapshot_interval_s=3600", "launch.heartbeat_liveness=15"])
    samplers: list[int] = []
    try:
        def shard(name: str) -> list[dict]:
            return [e for e in events(r.run / "logs" / "replay-0.jsonl")
                    if e.get("event") == name]

        def sizes() -> list[tuple[float, int]]:
            return [(e["ts"], e["replay/size"]) for e in shard("metrics") if "replay/size" in e]

        assert wait(lambda: sizes() and sizes()[-1][1] >= 1500, 180), "the buffer never filled"
        samplers = [r.pid(m) for m, role in r.members().items() if role == "sampler"]
        for pid in samplers:
            os.kill(pid, signal.SIGSTOP)
        # still: two reports a log write apart that agree
        def still():
            s = sizes()
            late = [v for t, v in s if t > s[-1][0] - 1.5]
            return s[-1][0] - s[0][0] > 1.5 and len(set(late)) == 1 and len(late) >= 3 and s[-1]
        held = wait(still, 60)
        assert held, sizes()[-5:]
        t_kill = time.time()
        os.kill(r.pid("replay-0"), signal.SIGKILL)
        back = wait(lambda: [e for e in shard("replay_restored") if e["ts"] > t_kill], 120)
        assert back, "no replay_restored after the kill"
        assert back[0]["from_snapshot"] == 0 and back[0]["logged_inserts"] > 0
        assert back[0]["size"] == held[1], (back[0], held)
        assert not shard("replay_log_stopped")
    finally:
        for pid in samplers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        r.stop()


async def test_a_full_disk_ends_the_log_not_the_shard(tmp_path):
    import asyncio
    import errno
    from types import SimpleNamespace

    from verl_zmq.roles.replay import ReplayRole

    log = wal.WriteAheadLog(tmp_path)
    log.append(wire.encode(_frag(0)))

    def full(records):
        raise OSError(errno.ENOSPC, "No space left on device")

    log.write = full  # type: ignore[method-assign]
    said: list[tuple[str, dict]] = []
    role = SimpleNamespace(wal=log, wal_lock=asyncio.Lock(), snapshot_dir=tmp_path,
                           log=SimpleNamespace(error=lambda ev, **kw: said.append((ev, kw))))
    await ReplayRole._wal_write(role)  # type: ignore[arg-type]
    assert role.wal is None  # no log from here on; the shard's loops go on
    assert said[0][0] == "replay_wal_failed" and said[0][1]["errno"] == "ENOSPC"
    await ReplayRole._wal_write(role)  # type: ignore[arg-type]  # nothing to do, no error


def test_frames_as_received_are_logged_without_a_copy_and_come_back_equal(tmp_path):
    """The shard logs the zmq frames it received (no re-encoding): zero-copy frames
    are checksummed and written in the writer's thread and replay byte for byte."""
    import zmq

    ctx = zmq.Context.instance()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    a.bind("inproc://wal-frames")
    b.connect("inproc://wal-frames")
    try:
        sent = [wire.encode(_frag(i)) for i in range(3)]
        log = wal.WriteAheadLog(tmp_path)
        for frames in sent:
            a.send_multipart(frames, copy=False)
            log.append(b.recv_multipart(copy=False))
        assert not (tmp_path / "wal-000000000000.log").exists()  # nothing written yet
        log.write(log.take())
        log.close()
    finally:
        a.close(0)
        b.close(0)
    got = list(wal.replay(tmp_path, 0))
    assert [s for s, _ in got] == [0, 1, 2]
    assert [[bytes(f) for f in fr] for _, fr in got] == [[bytes(memoryview(f)) for f in fr]
                                                      for fr in sent]
    assert [wire.decode(fr).version for _, fr in got] == [0, 1, 2]
