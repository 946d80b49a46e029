"""The first program inside a sandbox, run as root in fresh network, mount and
PID namespaces (`unshare`): it makes every mount read-only but the call's own
folder, sets the call's limits, drops to `nobody` and executes the call.

Standalone on purpose (run as `python -I jail.py`): nothing of the package is
imported where the untrusted call is about to run.

    python -I jail.py FOLDER PREFIX CPU_S MEMORY_MB FILE_MB PROCESSES -- ARGV...
"""

from __future__ import annotations

import ctypes
import os
import resource
import sys
from pathlib import Path

MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
NOBODY = 65534


def _mount(libc: ctypes.CDLL, src: str | None, target: str, flags: int,
           fstype: str | None = None, data: str | None = None) -> int:
    return int(libc.mount(src.encode() if src else None, target.encode(),
                          fstype.encode() if fstype else None, ctypes.c_ulong(flags),
                          data.encode() if data else None))


def _check(rc: int, what: str) -> None:
    if rc:
        raise OSError(ctypes.get_errno(), what)


def expose(libc: ctypes.CDLL, prefix: str, folder: str) -> None:
    """Let `nobody` run the interpreter under `prefix` where a folder above it is
    closed to others (a Python under /root): that folder is hidden under an empty
    tmpfs (its other files stay out of reach) and `prefix` alone is put back at
    the same path, so the interpreter's own absolute paths still hold."""
    closed = [a for a in reversed(Path(prefix).parents) if not os.stat(a).st_mode & 0o001]
    if not closed:
        return
    top = str(closed[0])
    stash = os.path.join(folder, ".prefix")
    os.mkdir(stash)
    _check(_mount(libc, prefix, stash, MS_BIND | MS_REC), f"binding {prefix}")
    _check(_mount(libc, "tmpfs", top, 0, "tmpfs", "mode=755"), f"hiding {top}")
    os.makedirs(prefix, exist_ok=True)
    _check(_mount(libc, stash, prefix, MS_BIND | MS_REC), f"restoring {prefix}")
    _check(int(libc.umount2(stash.encode(), MNT_DETACH)), "unmounting the stash")
    os.rmdir(stash)


def _mount_points() -> list[str]:
    with open("/proc/self/mountinfo") as f:
        # the fifth field; spaces in a path are written as \040
        return [line.split()[4].replace("\\040", " ") for line in f]


def read_only_but(folder: str, prefix: str) -> None:
    """Every mount read-only, `folder` (bound onto itself) writable, the
    interpreter under `prefix` reachable."""
    libc = ctypes.CDLL(None, use_errno=True)
    _check(_mount(libc, None, "/", MS_REC | MS_PRIVATE), "making mounts private")
    expose(libc, prefix, folder)
    _check(_mount(libc, folder, folder, MS_BIND | MS_REC), f"binding {folder}")
    for point in _mount_points():
        if point == folder:
            continue
        # special file systems may refuse (their flags are locked): the rest hold
        _mount(libc, None, point, MS_REMOUNT | MS_BIND | MS_RDONLY)
    if not _writable(folder) or _writable("/"):  # checked, not assumed
        raise OSError("the sandbox's mounts are not as asked")


def _writable(path: str) -> bool:
    return os.statvfs(path).f_flag & os.ST_RDONLY == 0


def limit(cpu_s: int, memory_mb: int, file_mb: int, processes: int) -> None:
    for what, soft, hard in (
            (resource.RLIMIT_CPU, cpu_s, cpu_s + 1),
            (resource.RLIMIT_AS, memory_mb << 20, memory_mb << 20),
            (resource.RLIMIT_FSIZE, file_mb << 20, file_mb << 20),
            (resource.RLIMIT_NPROC, processes, processes),
            (resource.RLIMIT_CORE, 0, 0),
            (resource.RLIMIT_NOFILE, 64, 64)):
        resource.setrlimit(what, (soft, hard))


def main(argv: list[str]) -> None:
    sep = argv.index("--")
    folder, prefix, cpu_s, memory_mb, file_mb, processes = argv[:sep]
    cmd = argv[sep + 1:]
    read_only_but(folder, prefix)
    os.chown(folder, NOBODY, NOBODY)
    # this process stays the namespace's first (when it ends, every process in it
    # is killed) and says how the call ended as its exit code: 128 + a signal
    pid = os.fork()
    if pid == 0:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)  # limits on processes hold for a user that is not root
        limit(int(cpu_s), int(memory_mb), int(file_mb), int(processes))
        os.chdir(folder)
        os.execve(cmd[0], cmd, {"PATH": "/usr/bin:/bin", "HOME": folder, "LANG": "C.UTF-8",
                                "PYTHONDONTWRITEBYTECODE": "1"})
    _, status = os.waitpid(pid, 0)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status)
             else 128 + os.WTERMSIG(status))


if __name__ == "__main__":
    main(sys.argv[1:])
