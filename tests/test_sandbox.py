"""A call in the sandbox that misbehaves is stopped, its caller gets an error in
words, and nothing of it is left: a loop without end, 10 GB of memory, forks
without end, a write outside its folder, a socket, a flood of output, a
process that tries to outlive it."""

from __future__ import annotations

import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from verl_zmq.sandbox import Limits, confined, run_python

pytestmark = pytest.mark.skipif(not confined(), reason="the sandbox's namespaces need root")
L = Limits(wall_s=4.0, cpu_s=2)


def _gone(token: str, within_s: float = 5.0) -> bool:
    """No process whose command line holds `token` is left (within a few seconds:
    the kernel ends a PID namespace's processes after its first one)."""
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        if subprocess.run(["pgrep", "-f", token], capture_output=True).returncode:
            return True
        time.sleep(0.1)
    return False


def test_a_plain_call_answers_and_keeps_its_own_folder():
    o = run_python("open('note', 'w').write('kept'); print(6 * 7, open('note').read())")
    assert o.ok and o.stdout.split() == ["42", "kept"] and o.exit_code == 0


def test_a_loop_without_end_is_stopped_in_time():
    token = uuid.uuid4().hex
    o = run_python(f"# {token}\nwhile True: pass", limits=L)
    assert not o.ok and ("CPU time" in o.error or "timed out" in o.error)
    assert o.seconds < L.wall_s + 5 and _gone(token)


def test_ten_gigabytes_are_refused():
    o = run_python("x = bytearray(10 * 2**30)", limits=L)
    assert not o.ok and "memory over 512 MB" in o.error


def test_forks_without_end_are_bounded_and_all_die():
    token = uuid.uuid4().hex
    o = run_python(f"# {token}\nimport os\nwhile True:\n    try:\n        os.fork()\n"
                   "    except OSError:\n        pass", limits=L)
    assert not o.ok and o.seconds < L.wall_s + 5 and _gone(token)


def test_nothing_outside_its_folder_is_written_or_read():
    # /tmp is writable by anyone: only the sandbox's mounts stop the write
    target = Path("/tmp") / f"verl-escaped-{uuid.uuid4().hex}"
    o = run_python(f"open({str(target)!r}, 'w').write('x')", limits=L)
    assert not o.ok and "Read-only file system" in o.error and not target.exists()
    o = run_python("import os; print(sorted(os.listdir('/root')))", limits=L)
    assert ".ssh" not in o.stdout  # the home folders above the interpreter are hidden


def test_a_socket_reaches_nothing():
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        server.settimeout(0.2)
        o = run_python(f"import socket; socket.create_connection(('127.0.0.1', {port}), 2)",
                       limits=L)
        assert not o.ok and "unreachable" in o.error
        with pytest.raises(TimeoutError):
            server.accept()


def test_output_beyond_its_cap_ends_the_call():
    o = run_python("while True: print('x' * 1000)", limits=L)
    assert not o.ok and "output over" in o.error and len(o.stdout) == L.output_bytes


def test_a_process_that_tries_to_outlive_the_call_does_not():
    token = uuid.uuid4().hex
    o = run_python(f"# {token}\nimport os, time\nif os.fork() == 0:\n    os.setsid()\n"
                   "    time.sleep(60)\nprint('parent done')", limits=L)
    assert o.ok and "parent done" in o.stdout and _gone(token)


def test_the_folder_is_removed_afterwards():
    o = run_python("import os; print(os.getcwd())")
    assert o.ok and not Path(o.stdout.strip()).exists()
