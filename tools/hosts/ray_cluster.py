"""A real Ray cluster on this machine: a head node and N worker nodes, each in a
network namespace of its own, started with Ray's own `ray start`, so that a
job's roles run as actors on "other nodes" and a node can be lost for real.

The head lives in namespace 0 at 10.77.0.1 (on its loopback: the address
stays while links come and go); worker i is 10.77.i.2, joined to the head's
namespace by a veth pair (10.77.i.1 on the head's side). Each node has its own
short temporary folder (Ray's socket paths must stay short). Losing a node
kills every process in its namespace and removes the namespace. Only the
namespaces and processes made here are touched: never `ray stop`, which would
stop every Ray process of the machine. Needs root and `ip netns`.

    with RayCluster(workers=1, cpus=[8, 4]) as c:
        subprocess.run([*c.wrap(0), python, "-m", "launcher.cli", c.spec, "job.toml"])
        c.lose(1)

    python tools/hosts/ray_cluster.py --workers 1   # bring one up, list its nodes, stop
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: tools.*
from tools.hosts.netns import (  # noqa: E402
    Managed,
    _ip,
    join,
    kill_namespace,
    namespace_pids,
    namespaces_refused,
)

HEAD = "10.77.0.1"
# quick to notice a lost node (Ray's defaults take about half a minute)
SYSTEM_CONFIG = {"health_check_period_ms": 1000, "health_check_timeout_ms": 1000,
                 "health_check_failure_threshold": 3}


def unavailable() -> str:
    """Why a Ray cluster cannot be made here, or empty."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "`ip` is not installed (apt-get install iproute2)"
    try:
        import ray  # noqa: F401
    except ImportError:
        return "ray is not installed (pip install 'verl-zmq[ray]')"
    return namespaces_refused()


class RayCluster(Managed):
    """A head and `workers` worker nodes; `cpus[i]`: node i's logical CPUs."""

    def __init__(self, workers: int = 1, cpus: list[int] | None = None, port: int = 6390):
        self.tag = uuid.uuid4().hex[:5]
        self.names = [f"vr{self.tag}n{i}" for i in range(workers + 1)]
        self.addresses = [HEAD] + [f"10.77.{i}.2" for i in range(1, workers + 1)]
        self.cpus = cpus or [8] * (workers + 1)
        self.port = port
        self.tmp = [Path(tempfile.mkdtemp(prefix=f"vr{i}", dir="/tmp"))
                    for i in range(workers + 1)]
        self.lost: set[int] = set()

    @property
    def address(self) -> str:
        return f"{HEAD}:{self.port}"

    @property
    def spec(self) -> str:
        """HOSTS for verl-launch."""
        return f"ray:{self.address}"

    def wrap(self, i: int) -> list[str]:
        """The command prefix that runs a command on node i."""
        return ["ip", "netns", "exec", self.names[i]]

    def _ray(self) -> str:
        return shutil.which("ray") or str(Path(sys.executable).with_name("ray"))

    def up(self) -> None:
        for name in self.names:
            _ip("netns", "add", name)
            _ip("link", "set", "lo", "up", ns=name)
        _ip("addr", "add", f"{HEAD}/32", "dev", "lo", ns=self.names[0])
        for i in range(1, len(self.names)):
            join(self.names[0], self.names[i], i, f"vr{self.tag}a{i}", f"vr{self.tag}b{i}")
        self._start(0, ["--head", "--port", str(self.port), "--include-dashboard=false",
                        f"--system-config={json.dumps(SYSTEM_CONFIG)}"])
        for i in range(1, len(self.names)):
            self._start(i, ["--address", self.address])
        self.wait_nodes(len(self.names))

    def _start(self, i: int, args: list[str]) -> None:
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
        r = subprocess.run(
            [*self.wrap(i), self._ray(), "start", *args, "--node-ip-address",
             self.addresses[i], "--num-cpus", str(self.cpus[i]), "--num-gpus", "0",
             "--object-store-memory", str(100 * 2**20), "--disable-usage-stats",
             "--temp-dir", str(self.tmp[i])],
            capture_output=True, text=True, env=env, timeout=120)
        if r.returncode:
            raise RuntimeError(f"ray start on node {i} failed: {r.stderr.strip()[-2000:]}")

    def nodes(self) -> list[dict[str, object]]:
        """The live nodes, as `launcher.ray_step nodes` prints them."""
        r = subprocess.run([*self.wrap(0), sys.executable, "-m", "launcher.ray_step", "nodes",
                            "--address", self.address], capture_output=True, text=True,
                           timeout=60, cwd=Path(__file__).resolve().parents[2])
        if r.returncode:
            raise RuntimeError(f"listing nodes failed: {r.stderr.strip()[-2000:]}")
        return list(json.loads(r.stdout))

    def wait_nodes(self, n: int, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            alive = len(self.nodes())
            if alive == n:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{alive} Ray nodes alive after {timeout_s:.0f}s, not {n}")
            time.sleep(0.5)

    def pids(self, i: int) -> list[int]:
        return namespace_pids(self.names[i])

    def lose(self, i: int) -> list[int]:
        """Node i crashes: every process on it dies and its namespace goes."""
        pids = self._kill(i)
        subprocess.run(["ip", "netns", "del", self.names[i]], capture_output=True)
        self.lost.add(i)
        return pids

    def _kill(self, i: int) -> list[int]:
        return kill_namespace(self.names[i])

    def close(self) -> None:
        for i in reversed(range(len(self.names))):
            if i not in self.lost:
                self._kill(i)
        time.sleep(0.2)
        for i, name in enumerate(self.names):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
            shutil.rmtree(self.tmp[i], ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=1)
    a = ap.parse_args()
    if why := unavailable():
        sys.exit(f"error: {why}")
    with RayCluster(workers=a.workers) as c:
        print(json.dumps(c.nodes(), indent=2))


if __name__ == "__main__":
    main()
