"""Replay snapshots: a shard's arrays and counters in one `.npz` file, written
atomically (temporary file, then os.replace) and read with allow_pickle=False,
so a snapshot is data only and a crash mid-write leaves the previous one."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

import numpy as np

FILE = "snapshot.npz"


def snapshot_dir(run_dir: Path, member_id: str) -> Path:
    """replay/<shard-id>/ in the shard's run folder on its own host."""
    return Path(run_dir) / "replay" / member_id


def write(directory: Path, arrays: dict[str, np.ndarray]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / FILE
    # a unique temporary name: a periodic write still running in its thread and
    # the write on stop must not share one
    with tempfile.NamedTemporaryFile(dir=directory, prefix=f".{FILE}.", delete=False) as f:
        try:
            np.savez(f, **arrays)  # type: ignore[arg-type]  # numpy's stub: allow_pickle
        except BaseException:  # a full disk: no half-written temporary stays behind
            with contextlib.suppress(OSError):
                os.unlink(f.name)
            raise
    os.replace(f.name, path)
    return path


def read(directory: Path) -> dict[str, np.ndarray] | None:
    """The snapshot's arrays, or None when there is none."""
    path = directory / FILE
    if not path.exists():
        return None
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}
