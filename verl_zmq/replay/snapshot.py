"""Replay snapshots: a shard's arrays and counters in `.npz` files, written
atomically (temporary file, then os.replace) and read with allow_pickle=False,
so a snapshot is data only and a crash mid-write leaves the previous one.

A full snapshot (`snapshot.npz`) is followed by incremental ones
(`delta-000001.npz`, ...): each holds only the transitions inserted since the
previous file, their slots, every priority and the counters, and names the
insert count it builds on (`since`). Reading applies the deltas in order onto the
full one while each builds on what came before; a gap (a delta lost, or left
from before a newer full snapshot) ends the chain there. A full snapshot
removes the deltas it replaces."""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from pathlib import Path

import numpy as np

FILE = "snapshot.npz"
DELTA = re.compile(r"delta-(\d{6})\.npz")


def snapshot_dir(run_dir: Path, member_id: str) -> Path:
    """replay/<shard-id>/ in the shard's run folder on its own host."""
    return Path(run_dir) / "replay" / member_id


def _write(directory: Path, name: str, arrays: dict[str, np.ndarray]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    # a unique temporary name: a periodic write still running in its thread and
    # the write on stop must not share one
    with tempfile.NamedTemporaryFile(dir=directory, prefix=f".{name}.", delete=False) as f:
        try:
            np.savez(f, **arrays)  # type: ignore[arg-type]  # numpy's stub: allow_pickle
        except BaseException:  # a full disk: no half-written temporary stays behind
            with contextlib.suppress(OSError):
                os.unlink(f.name)
            raise
    os.replace(f.name, path)
    return path


def _deltas(directory: Path) -> list[Path]:
    found = [p for p in directory.glob("delta-*.npz") if DELTA.fullmatch(p.name)]
    return sorted(found, key=lambda p: p.name)


def write(directory: Path, arrays: dict[str, np.ndarray]) -> Path:
    """A full snapshot; the deltas before it are removed once it is in place."""
    path = _write(directory, FILE, arrays)
    for old in _deltas(directory):
        with contextlib.suppress(OSError):
            old.unlink()
    return path


def write_delta(directory: Path, arrays: dict[str, np.ndarray], n: int) -> Path:
    """The `n`-th delta after the full snapshot."""
    return _write(directory, f"delta-{n:06d}.npz", arrays)


def apply_delta(state: dict[str, np.ndarray], delta: dict[str, np.ndarray]) -> None:
    """Put `delta` over `state` (both as `RingStorage.state`/`delta` lay them out,
    in the writer's slots): its rows at their slots, its counters and priorities."""
    size = int(delta["counters"][1])
    slots = delta["slots"]
    for k, v in delta.items():
        if k.startswith("col/") or k == "generation":
            old = state.get(k)
            if old is None or len(old) < size:  # the ring was not full yet: it grew
                grown = np.zeros((size, *v.shape[1:]), v.dtype)
                if old is not None:
                    grown[:len(old)] = old
                state[k] = old = grown
            old[slots] = v
        elif k not in ("slots", "since"):
            state[k] = v  # counters, priorities, store counters: the delta's are newer


def read(directory: Path) -> dict[str, np.ndarray] | None:
    """The newest state the files hold (the full snapshot and the deltas that
    build on it, in order), or None when there is none."""
    path = directory / FILE
    if not path.exists():
        return None
    state = _load(path)
    for p in _deltas(directory):
        delta = _load(p)
        if int(delta["since"][0]) != int(state["counters"][2]):
            break  # not built on what we hold: the chain ends here
        apply_delta(state, delta)
    return state


def _load(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}
