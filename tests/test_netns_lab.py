"""The namespace hosts of tools/hosts/netns.py reach one another, not only host 0:
peers on hosts 1 and 2 gossip directly (a machine per peer), as machines on one
switch would."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tools.hosts.netns import Lab, unavailable

LISTEN = ("import socket; s = socket.socket(); s.bind(('0.0.0.0', 5555)); s.listen(); "
          "print('up', flush=True); c, _ = s.accept(); c.sendall(b'hello'); c.close()")


@pytest.mark.timeout(120)
def test_host_1_reaches_host_2_through_host_0(tmp_path):
    why = unavailable()
    if why:
        pytest.skip(f"namespace hosts cannot be made here: {why}")
    with Lab(tmp_path, hosts=3) as lab:
        srv = subprocess.Popen(["ip", "netns", "exec", lab.names[2], sys.executable, "-c",
                                LISTEN], stdout=subprocess.PIPE, text=True)
        try:
            assert srv.stdout is not None and srv.stdout.readline().strip() == "up"
            got = subprocess.run(
                ["ip", "netns", "exec", lab.names[1], sys.executable, "-c",
                 f"import socket; s = socket.create_connection(('{lab.addresses[2]}', 5555), "
                 "timeout=10); print(s.recv(5).decode())"],
                capture_output=True, text=True, timeout=60)
            assert got.returncode == 0 and got.stdout.strip() == "hello", got.stderr
        finally:
            srv.kill()
            srv.wait()
