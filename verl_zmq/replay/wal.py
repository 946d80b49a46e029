"""A replay shard's write-ahead log: every fragment the shard inserts, as the
wire encodes it, appended to `wal-<seq>.log` files beside the snapshots and
written out (and fsync'd) together at least every `replay.wal_interval_s`, so a
shard killed between two snapshots loses at most that much of what it took.

Records are numbered from 0 over the shard's life (`seq`); each is
`seq, length, crc32` (little-endian u64, u32, u32) then its frames (a u32 count,
a u32 length each, the bytes). A snapshot records the `seq` at which its copy was
taken (`wal_seq`) and the log starts a new file there (`cut`); once that
snapshot is in place the files before it are removed (`drop_before`). A
replacement reads the snapshot, then the records from its `wal_seq` on, in
order, until a gap or a record torn by the crash (`replay`). Records are decoded
by the wire's own decoder: nothing is unpickled.
"""

from __future__ import annotations

import contextlib
import os
import re
import struct
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

HEAD = struct.Struct("<QII")  # seq, payload length, crc32 of the payload
COUNT = struct.Struct("<I")
NAME = re.compile(r"wal-(\d{12})\.log")


def _view(frame: Any) -> memoryview:
    """A frame's bytes without a copy (bytes, a zmq.Frame, an array)."""
    return memoryview(frame).cast("B")


def pack(frames: Sequence[Any]) -> bytes:
    """A message's frames as one payload: a count, each length, the bytes."""
    return b"".join(_parts(frames))


def _parts(frames: Sequence[Any]) -> list[Any]:
    views = [_view(f) for f in frames]
    lengths = struct.pack(f"<{len(views)}I", *(v.nbytes for v in views))
    return [COUNT.pack(len(views)), lengths, *views]


def record(seq: int, frames: Sequence[Any]) -> list[Any]:
    """One record as the buffers to write in order: its head (seq, length, crc32 of
    the payload), then the payload's parts, none of them copied."""
    parts = _parts(frames)
    crc = 0
    for part in parts:
        crc = zlib.crc32(part, crc)
    return [HEAD.pack(seq, sum(memoryview(p).nbytes for p in parts), crc), *parts]


def unpack(payload: bytes) -> list[bytes]:
    """The frames of `pack`; ValueError for a payload that does not add up."""
    (n,) = COUNT.unpack_from(payload, 0)
    at = COUNT.size + 4 * n
    if at > len(payload):
        raise ValueError("frame lengths beyond the record")
    lengths = struct.unpack_from(f"<{n}I", payload, COUNT.size)
    out = []
    for size in lengths:
        out.append(payload[at:at + size])
        at += size
    if at != len(payload):
        raise ValueError("frames do not fill the record")
    return out


def segments(directory: Path) -> list[tuple[int, Path]]:
    """The log's files, by the first seq each holds."""
    found = [(int(m.group(1)), p) for p in directory.glob("wal-*.log")
             if (m := NAME.fullmatch(p.name))]
    return sorted(found)


class WriteAheadLog:
    """The log of one shard (see the module). `append` and `cut` are called from
    the shard's event loop and only keep the frames as they came off the wire;
    `take`, then `write` in a thread, checksums and writes what was appended since
    the last write (the shard's loop never copies or checksums a fragment)."""

    def __init__(self, directory: Path, seq: int = 0):
        self.directory = directory
        self.seq = seq  # the next record's number
        self.base = seq  # the file new records go to
        self.pending: list[tuple[int, int, Sequence[Any]]] = []  # (file base, seq, frames)
        self.files: dict[int, BinaryIO] = {}
        self.bytes_written = 0

    def append(self, frames: Sequence[Any]) -> int:
        """Log one message's frames; its seq."""
        seq = self.seq
        self.pending.append((self.base, seq, frames))
        self.seq += 1
        return seq

    def cut(self) -> int:
        """Start a new file at the next seq (a snapshot's copy was taken here); the
        seq, which the snapshot records."""
        self.base = self.seq
        return self.seq

    def take(self) -> list[tuple[int, int, Sequence[Any]]]:
        """What was appended since the last `take`, to hand to `write`."""
        out, self.pending = self.pending, []
        return out

    def write(self, records: list[tuple[int, int, Sequence[Any]]]) -> int:
        """Append `records` to their files and fsync them; the bytes written. An
        OSError (a full disk) leaves what was written before it."""
        touched: set[int] = set()
        n = 0
        for base, seq, frames in records:
            f = self.files.get(base)
            if f is None:
                self.directory.mkdir(parents=True, exist_ok=True)
                f = self.files[base] = open(  # noqa: SIM115 - kept open between writes
                    self.directory / f"wal-{base:012d}.log", "ab")
            for part in record(seq, frames):
                n += f.write(part)
            touched.add(base)
        for base in touched:
            self.files[base].flush()
            os.fsync(self.files[base].fileno())
        self.bytes_written += n
        return n

    def drop_before(self, seq: int) -> None:
        """Remove the files whose records all come before `seq` (a snapshot that holds
        them is in place), and what waits to be written to them."""
        self.pending = [r for r in self.pending if r[0] >= seq]
        for base, path in segments(self.directory):
            if base < seq:
                f = self.files.pop(base, None)
                if f is not None:
                    f.close()
                with contextlib.suppress(OSError):
                    path.unlink()

    def close(self) -> None:
        for f in self.files.values():
            with contextlib.suppress(OSError):
                f.close()
        self.files.clear()


def replay(directory: Path, since: int) -> Iterator[tuple[int, list[bytes]]]:
    """The logged messages from `since` on, in order: (seq, frames). Stops at a gap
    or at a record that is cut short or fails its checksum (the crash's)."""
    want = since
    for _, path in segments(directory):
        try:
            data = path.read_bytes()
        except OSError:
            return
        at = 0
        while at + HEAD.size <= len(data):
            seq, size, crc = HEAD.unpack_from(data, at)
            payload = data[at + HEAD.size:at + HEAD.size + size]
            if len(payload) < size or zlib.crc32(payload) != crc:
                break  # torn by the crash: the rest of this file is not trusted
            at += HEAD.size + size
            if seq < want:
                continue  # in the snapshot already
            if seq > want:
                return  # a gap: what follows would skip records
            try:
                frames = unpack(payload)
            except (ValueError, struct.error):
                return
            yield seq, frames
            want += 1
