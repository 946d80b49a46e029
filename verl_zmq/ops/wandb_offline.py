"""Reading a Weights & Biases offline run back without the network: the run's
`.wandb` file is a log of protobuf records in 32 KiB blocks (LevelDB's log
format: a 7-byte header per piece, checksum, length, type); its `history`
records are what `run.log` wrote (`history`)."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

BLOCK = 32 * 1024
HEADER = b":W&B"  # then the magic 0xBEE1 and a version byte
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def _records(data: bytes) -> Iterator[bytes]:
    if not data.startswith(HEADER):
        raise ValueError("not a W&B run file (no :W&B header)")
    pos, piece = 7, b""
    while pos + 7 <= len(data):
        left = BLOCK - pos % BLOCK
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        pos += 7
        chunk, pos = data[pos:pos + length], pos + length
        if kind == FULL:
            yield chunk
        elif kind == FIRST:
            piece = chunk
        elif kind == MIDDLE:
            piece += chunk
        elif kind == LAST:
            yield piece + chunk
            piece = b""
        else:  # zeros: the end of what was written
            return


def offline_runs(run_dir: Path) -> list[Path]:
    """The offline W&B runs written into a run folder (its wandb/), oldest first."""
    return sorted((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))


def finished(path: Path) -> bool:
    """Whether the run's exit record is written (every row before it is too)."""
    from wandb.proto import wandb_internal_pb2 as pb

    try:
        raw = path.read_bytes()
        for piece in _records(raw):
            rec = pb.Record()
            rec.ParseFromString(piece)
            if rec.WhichOneof("record_type") == "exit":
                return True
    except (OSError, ValueError):
        pass
    return False


def history(path: Path) -> list[dict[str, Any]]:
    """Every `run.log` row of one `.wandb` file, in order."""
    from wandb.proto import wandb_internal_pb2 as pb

    rows = []
    for raw in _records(path.read_bytes()):
        rec = pb.Record()
        rec.ParseFromString(raw)
        if rec.WhichOneof("record_type") == "history":
            rows.append({i.key or "/".join(i.nested_key): json.loads(i.value_json)
                         for i in rec.history.item})
    return rows
