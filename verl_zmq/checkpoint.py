"""Checkpoints: atomic writes (temporary file, then os.replace), `latest.pt`
naming the newest, pruning to `checkpoint.keep`, and loading with
`weights_only=True` so a checkpoint cannot run code."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from .files import free_mb


def _temporary(path: Path, kind: str) -> Path:
    """A name beside `path` that no other write uses: two writes of one file at once
    (a periodic snapshot and the checkpoint a stopping trainer writes, in two
    threads of one process) each rename their own."""
    return path.with_name(f".{path.name}.{kind}-{os.getpid()}-{uuid.uuid4().hex[:12]}")


def save_atomic(obj: dict[str, Any], path: Path) -> None:
    """Write to a temporary file, then rename: a reader sees the old file or the new
    one. A failed write (a full disk) leaves the old file and no temporary."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary(path, "tmp")
    try:
        try:
            torch.save(obj, tmp)
        except RuntimeError as e:  # torch's zip writer reports a failed write (a full
            # disk) as a RuntimeError: an OSError here, as every other failed write
            full = free_mb(path.parent) < 1.0
            raise OSError(errno.ENOSPC if full else errno.EIO,
                          f"{os.strerror(errno.ENOSPC) if full else 'write failed'}: "
                          f"{str(e)[:200]}", str(tmp)) from e
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def save_folder_atomic(write: Callable[[Path], None], path: Path) -> None:
    """Have `write` fill a temporary folder, then swap it in for `path`: a reader
    finds the old folder or the new one whole (for a moment, neither)."""
    tmp, old = _temporary(path, "tmp"), _temporary(path, "old")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        write(tmp)
        if path.exists():
            os.replace(path, old)
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(old, ignore_errors=True)


def load(path: str | Path, device: str = "cpu") -> dict[str, Any]:
    """A checkpoint, read with `weights_only=True` (no pickled code runs)."""
    out: dict[str, Any] = torch.load(path, map_location=device, weights_only=True)
    return out


def write_checkpoint(d: Path, env_steps: int, state: dict[str, Any], keep: int) -> Path:
    """<d>/step_<n>.pt and latest.pt; prune old step files to `keep`."""
    path = d / f"step_{env_steps}.pt"
    save_atomic(state, path)
    save_atomic(state, d / "latest.pt")
    steps = sorted((int(m.group(1)), p) for p in d.glob("step_*.pt")
                   if (m := re.fullmatch(r"step_(\d+)\.pt", p.name)))
    for _, old in steps[:-keep] if keep > 0 else []:
        old.unlink(missing_ok=True)
    return path


def numpy_state(arrays: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """Params arrays as tensors (what weights_only loading accepts)."""
    import numpy as np

    return {k: torch.from_numpy(np.array(v)) for k, v in arrays.items()}


def policy_state(job_text: str, algorithm: str, policy: Mapping[str, Any],
                 rms: Mapping[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    """What every checkpoint holds for using the policy outside the job (best.pt is
    only this): the resolved job, the policy's arrays and the obs statistics."""
    return {"job": job_text, "algorithm": algorithm, "policy": numpy_state(policy),
            "rms": numpy_state(rms or {}), **meta}
