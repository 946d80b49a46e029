"""Per-role resources at launch: a sampler whose memory limit is below what it
needs fails with a clear error, the restart policy applies, and the launcher's
summary names it."""

from __future__ import annotations

import json
import signal

import pytest

from tests.conftest import CONFIGS, ROOT, kill_tree, read_events, start_job, wait_for

pytestmark = pytest.mark.e2e  # real processes


@pytest.mark.timeout(300)
def test_sampler_over_its_memory_limit_fails_clearly(tmp_path):
    run = tmp_path / "run"
    # a sampler acting with torch: torch alone maps ~1 GB (a numpy sampler fits in 300 MB)
    proc = start_job(CONFIGS / "cartpole_ppo.toml", run, "sampling.num_workers=1",
                     'sampling.inference="torch"', 'resources.sampler.memory="300MB"',
                     "launch.max_restarts_per_role={sampler = 1}",
                     "launch.restart_backoff_s=0.2")
    try:
        failed = wait_for(lambda: [e for e in read_events(run / "logs" / "launcher.jsonl")
                                   if e.get("event") == "role_failed"], 120,
                          what="the sampler failing for good")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        kill_tree(proc)
    assert failed[0]["member"] == "sampler-0"
    events = read_events(run / "logs" / "launcher.jsonl")
    assert [e for e in events if e.get("event") == "role_restarted"
            and e.get("member") == "sampler-0"]  # the restart policy applied first
    summary = json.loads((run / "summary.json").read_text())
    msg = summary["failed_roles"]["sampler-0"]
    assert "over its memory limit of 300MB" in msg and "resources.sampler.memory" in msg, msg
    assert "Traceback" not in msg
    assert "failed for good: sampler-0" in err and "memory limit of 300MB" in err
    logged = read_events(run / "logs" / "sampler-0.jsonl")
    assert any(e.get("event") == "memory_limit_exceeded" for e in logged)


def test_a_fork_already_over_its_limit_says_so_before_setting_it():
    """A role forked from the torch zygote holds torch when its limit is set: a
    limit below that is refused at once, clearly, not at a later allocation."""
    import resource

    from verl_zmq.runner import address_space, limit_memory

    before = resource.getrlimit(resource.RLIMIT_AS)
    assert address_space() > 10 * 2**20
    with pytest.raises(MemoryError, match="in use at the role's start"):
        limit_memory("10MB")
    assert resource.getrlimit(resource.RLIMIT_AS) == before  # nothing was set


LOWER = """
import os, time
from verl_zmq.log import get_logger
from verl_zmq.runner import lower_priority
os.setsid()  # a role leads its own session, as launched
lower_priority(7, get_logger())
print("nice", os.getpriority(os.PRIO_PROCESS, 0), flush=True)
group = ""
for _ in range(50):  # the session's CPU share is lowered in the background
    if not os.path.exists("/proc/self/autogroup"):
        break
    group = open("/proc/self/autogroup").read()
    if group.split()[-1] == "7":
        break
    time.sleep(0.1)
print("group", group.strip() or "no autogroup", flush=True)
"""


def test_a_role_lowers_its_priority_and_its_sessions():
    """`resources.<role>.nice`: the process's nice value, and where the kernel
    shares CPU between sessions first (autogroup), its session's; out of 0-19 the
    job file is refused, naming the key."""
    import subprocess
    import sys

    from verl_zmq.config import ConfigError, load_job

    out = subprocess.run([sys.executable, "-c", LOWER], capture_output=True, text=True,
                         timeout=60, cwd=ROOT)
    said = dict(x.split(" ", 1) for x in out.stdout.splitlines()
                if x.startswith(("nice ", "group ")))
    nice, group = said.get("nice"), said.get("group", "")
    assert nice == "7", out
    assert group == "no autogroup" or group.endswith("nice 7"), group
    with pytest.raises(ConfigError, match="resources.sampler.nice: expected 0 to 19"):
        load_job(CONFIGS / "cartpole_ppo.toml", ["resources.sampler.nice=20"])

