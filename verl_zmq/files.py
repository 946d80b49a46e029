"""Files that roles and the launcher write: what a killed writer left behind, and
how much room is left. Torch-free (the launcher uses it)."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path


def clean_temporaries(d: Path) -> list[Path]:
    """Remove the temporary files (`.NAME.tmp-PID`) that writers no longer alive
    left in `d` (killed, or stopped by a full disk); a role calls it when it starts.
    A live writer's file (another role on this host) is left alone."""
    removed = []
    for p in Path(d).glob(".*.tmp-*") if Path(d).is_dir() else []:
        pid = p.name.rsplit("-", 1)[-1]
        if pid.isdigit() and pid_alive(int(pid)):
            continue
        with contextlib.suppress(OSError):
            p.unlink()
            removed.append(p)
    return removed


def pid_alive(pid: int) -> bool:
    """Whether a process `pid` exists (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def free_mb(d: Path) -> float:
    """Free space, in MiB, on the filesystem that holds `d` (or its nearest parent)."""
    p = Path(d).resolve()
    while not p.exists() and p != p.parent:
        p = p.parent
    return shutil.disk_usage(p).free / 2**20
