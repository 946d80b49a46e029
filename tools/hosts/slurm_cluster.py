"""A real Slurm cluster on this machine: N namespace hosts (`netns.Lab`), one
munged, slurmctld on host 0 and one slurmd per host (each named with `-N`, its
own spool, log and pid files, reached at its namespace's address), so batch
jobs and their steps run on "other nodes" with real srun, scancel and squeue.

The configuration works without systemd or cgroup delegation: process tracking
by process group (`proctrack/pgid`), no task plugin (`task/none`), CPUs as the
consumable resource (`select/cons_tres`, `CR_CPU`), no accounting daemon. Needs
root, `ip netns`, sshd (the Lab's) and Debian's `slurm-wlm` and `munge`.

    with SlurmCluster(tmp, nodes=3, cpus=4) as c:
        job_id = c.sbatch(script)        # runs on n0 (host 0), its steps anywhere
        print(c.run(["squeue", "--steps"]).stdout)

    python tools/hosts/slurm_cluster.py --nodes 3   # bring one up, show sinfo, tear down
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: tools.*
from tools.hosts.netns import Lab, Managed  # noqa: E402
from tools.hosts.netns import unavailable as netns_unavailable  # noqa: E402

DAEMONS = ("slurmctld", "slurmd", "munged", "sbatch", "srun", "squeue", "scancel", "sinfo")


def unavailable() -> str:
    """Why a Slurm cluster cannot be made here, or empty."""
    why = netns_unavailable()
    if why:
        return why
    for tool in DAEMONS:
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            return f"`{tool}` is not installed (apt-get install slurm-wlm munge)"
    return ""


def cgroup_plugin() -> str:
    """cgroup/v2 where /sys/fs/cgroup is the unified hierarchy, else cgroup/v1."""
    return "cgroup/v2" if Path("/sys/fs/cgroup/cgroup.controllers").exists() else "cgroup/v1"


def _exe(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


SLURM_CONF = """\
ClusterName=verlzmq
SlurmctldHost={hostname}({ctl})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={munge}
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
SlurmctldPort={ctl_port}
SlurmdPort={d_port}
SlurmctldTimeout=30
SlurmdTimeout=10
InactiveLimit=0
KillWait=5
MinJobAge=60
StateSaveLocation={tmp}/state
SlurmdSpoolDir={tmp}/spool/%n
SlurmctldPidFile={tmp}/run/slurmctld.pid
SlurmdPidFile={tmp}/run/slurmd-%n.pid
SlurmctldLogFile={tmp}/log/slurmctld.log
SlurmdLogFile={tmp}/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
# every node is this machine: its CPUs are the configured ones, not the hardware's
SlurmdParameters=config_overrides
{nodes}
PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
"""


class SlurmCluster(Managed):
    """Slurm daemons on the namespace hosts of a `Lab` (see the module)."""

    def __init__(self, tmp: Path, nodes: int = 3, cpus: int = 4):
        self.tmp = Path(tmp)
        self.lab = Lab(self.tmp / "lab", hosts=nodes)
        self.names = [f"n{i}" for i in range(nodes)]
        self.cpus = cpus
        self.conf = self.tmp / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.procs: dict[str, subprocess.Popen] = {}
        self.munge_key = self.tmp / "munge" / "munge.key"
        self.munge_socket = self.tmp / "munge" / "munge.socket"
        self.mounted = False

    # -- building and tearing down ------------------------------------------------

    def up(self, timeout_s: float = 60.0) -> None:
        self.lab.up()
        for d in ("state", "spool", "run", "log", "munge"):
            (self.tmp / d).mkdir(parents=True, exist_ok=True)
        for n in self.names:
            (self.tmp / "spool" / n).mkdir(exist_ok=True)
        os.chmod(self.tmp / "munge", 0o700)
        self._munge()
        # `ip netns exec` mounts a fresh /sys, which hides the cgroup file systems that
        # slurmd insists on finding: they are bound where the namespaces still see them
        self.cgroup = self.tmp / "cgroup"
        self.cgroup.mkdir(exist_ok=True)
        subprocess.run(["mount", "--rbind", "/sys/fs/cgroup", str(self.cgroup)], check=True)
        self.mounted = True
        (self.tmp / "cgroup.conf").write_text(f"CgroupPlugin={cgroup_plugin()}\n"
                                             f"CgroupMountpoint={self.cgroup}\n"
                                             "ConstrainCores=no\nConstrainRAMSpace=no\n")
        nodes = "\n".join(f"NodeName={n} NodeAddr={a} CPUs={self.cpus} State=UNKNOWN"
                          for n, a in zip(self.names, self.lab.addresses, strict=True))
        self.conf.write_text(SLURM_CONF.format(hostname=socket.gethostname().split(".")[0],
                                               ctl=self.lab.addresses[0], ctl_port=6817,
                                               munge=self.munge_socket,
                                               d_port=6818, tmp=self.tmp, nodes=nodes))
        self._start("slurmctld", 0, [_exe("slurmctld"), "-D", "-i", "-f", str(self.conf)])
        for i, n in enumerate(self.names):
            self._start(f"slurmd-{n}", i, [_exe("slurmd"), "-D", "-N", n, "-f",
                                             str(self.conf)])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            states = self.node_states()
            if len(states) == len(self.names) and all(s.startswith("idle")
                                                      for s in states.values()):
                return
            time.sleep(0.5)
        raise RuntimeError(f"Slurm nodes not idle after {timeout_s:.0f} s: {self.node_states()}"
                           f"\n{self.logs()}")

    def _munge(self) -> None:
        if not self.munge_key.exists():
            self.munge_key.write_bytes(os.urandom(1024))
            os.chmod(self.munge_key, 0o400)
        # one munged for every namespace: its socket is a file, which a network
        # namespace does not hide
        self.procs["munged"] = subprocess.Popen(
            [_exe("munged"), "-F", "--force", f"--key-file={self.munge_key}",
             f"--socket={self.munge_socket}", f"--pid-file={self.tmp}/munge/munged.pid",
             f"--log-file={self.tmp}/log/munged.log", f"--seed-file={self.tmp}/munge/seed"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not self.munge_socket.exists():
            if time.monotonic() > deadline:
                raise RuntimeError("munged did not start: " + self._read("log/munged.log"))
            time.sleep(0.1)

    def _start(self, name: str, host: int, argv: list[str]) -> None:
        log = open(self.tmp / "log" / f"{name}.out", "ab")  # noqa: SIM115
        self.procs[name] = subprocess.Popen([*self.lab.wrap(host), *argv], env=self.daemon_env,
                                            stdout=log, stderr=log)
        log.close()

    @property
    def daemon_env(self) -> dict[str, str]:
        return {**self.env, "MUNGE_SOCKET": str(self.munge_socket)}

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.run(["scancel", "--full", "--user=root"], timeout=10)
        for p in reversed(list(self.procs.values())):
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        self.procs.clear()
        self.lab.close()  # every process left in a namespace, then the namespaces
        if self.mounted:
            subprocess.run(["umount", "-R", str(self.cgroup)], capture_output=True)
            self.mounted = False

    # -- using it -------------------------------------------------------------------

    def run(self, argv: list[str], host: int = 0, **kw) -> subprocess.CompletedProcess:
        """A Slurm client command inside host `host`, as text."""
        kw.setdefault("capture_output", True)
        return subprocess.run([*self.lab.wrap(host), *argv], env=self.daemon_env, text=True,
                              **kw)

    def node_states(self) -> dict[str, str]:
        r = self.run(["sinfo", "-N", "-h", "-o", "%N %t"], timeout=15)
        out = {}
        for line in r.stdout.splitlines():
            name, _, state = line.partition(" ")
            out[name] = state.strip()
        return out

    def sbatch(self, script: Path, *opts: str) -> int:
        r = self.run(["sbatch", "--parsable", *opts, str(script)], timeout=30)
        if r.returncode:
            raise RuntimeError(f"sbatch failed: {r.stderr.strip()}")
        return int(r.stdout.strip().split(";")[0])

    def steps(self, job_id: int) -> str:
        return self.run(["squeue", "--steps", "-j", str(job_id), "-o", "%i %j %N"],
                        timeout=15).stdout

    def job_state(self, job_id: int) -> str:
        r = self.run(["scontrol", "-o", "show", "job", str(job_id)], timeout=15)
        for part in r.stdout.split():
            if part.startswith("JobState="):
                return part.split("=", 1)[1]
        return "GONE"

    def lose(self, node: int) -> None:
        """Node `node` crashes: its slurmd and everything in its namespace die."""
        self.procs.pop(f"slurmd-{self.names[node]}", None)
        self.lab.lose(node)

    def boot(self, node: int, timeout_s: float = 60.0) -> None:
        """Node `node` comes back: its link, sshd and slurmd, until Slurm has it idle
        again (ReturnToService=2 takes back a node that registers)."""
        self.lab.boot(node)
        name = self.names[node]
        self._start(f"slurmd-{name}", node, [_exe("slurmd"), "-D", "-N", name, "-f",
                                              str(self.conf)])
        deadline = time.monotonic() + timeout_s
        while not self.node_states().get(name, "").startswith("idle"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} not idle again: {self.node_states()}")
            time.sleep(0.5)

    def _read(self, rel: str) -> str:
        with contextlib.suppress(OSError):
            return (self.tmp / rel).read_text()[-3000:]
        return ""

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}"
                         for p in sorted((self.tmp / "log").glob("*")) if p.is_file())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--cpus", type=int, default=4)
    args = ap.parse_args()
    why = unavailable()
    if why:
        print(f"cannot make a Slurm cluster here: {why}")
        return 2
    import tempfile

    with tempfile.TemporaryDirectory() as tmp, SlurmCluster(Path(tmp), args.nodes,
                                                            args.cpus) as c:
        print(c.run(["sinfo", "-N"]).stdout)
        script = Path(tmp) / "hello.sh"
        script.write_text("#!/bin/sh\nsrun --overlap -N1 -n1 --nodelist=n1 hostname -I\n"
                          "srun --overlap -N1 -n1 --nodelist=n2 sleep 2\n")
        job = c.sbatch(script, "-N", str(args.nodes), f"--output={tmp}/hello.out")
        deadline = time.monotonic() + 60
        while c.job_state(job) in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING") \
                and time.monotonic() < deadline:
            print(c.steps(job).strip())
            time.sleep(1)
        print(f"job {job}: {c.job_state(job)}; output:\n{Path(tmp, 'hello.out').read_text()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
