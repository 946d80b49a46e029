#!/usr/bin/env python3
"""A stand-in for the `ssh` client, for tests: it runs the remote command on this
machine, unless `$FAKE_SSH_DOWN/<host>` exists (the host is "lost"): then it
fails as ssh does when it cannot connect, with exit code 255. A session whose
host is lost while it runs also ends with 255, as a broken connection would.
SIGTERM and SIGINT are passed on to the command, as a closing session would."""

import os
import signal
import subprocess
import sys


def lose_host(down_dir, address: str, python: str = sys.executable) -> list[int]:
    """Make `address` a lost host: mark it down (this stand-in then fails as ssh does)
    and SIGKILL every role running there (the `python -m verl_zmq.cli role ...`
    processes bound on it, not the stand-ins that started them). Their pids."""
    with open(os.path.join(str(down_dir), address), "w"):
        pass
    ps = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True)
    pids = [int(line.split()[0]) for line in ps.stdout.splitlines()
            if f"--bind {address}" in line and line.split()[1:3] == [python, "-m"]]
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    return pids


def main() -> int:
    args = sys.argv[1:]
    while args and args[0].startswith("-"):  # -o KEY=VALUE, -p PORT: an option and its value
        args = args[2:]
    target, command = args[0], " ".join(args[1:])
    host = target.rsplit("@", 1)[-1]
    down = os.path.join(os.environ["FAKE_SSH_DOWN"], host)
    if os.path.exists(down):
        print(f"ssh: connect to host {host} port 22: No route to host", file=sys.stderr)
        return 255
    child = subprocess.Popen(["/bin/sh", "-c", command])
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda s, _f: child.send_signal(s))
    rc = child.wait()
    if os.path.exists(down):
        print(f"Connection to {host} closed by remote host.", file=sys.stderr)
        return 255
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main())
