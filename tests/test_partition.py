"""A network partition between hosts that are network namespaces (tools/hosts/netns.py):
the main job runs with samplers on two namespace hosts, each reached over SSH;
host 1's link goes down for longer than heartbeat x liveness, then heals. The
registry drops host 1's samplers, the rest carry on, the samplers register
again after the heal and ship experience again, the job reaches its target and
nothing is left running on either side. The scenario is tools/faults/scenarios.py's."""

from __future__ import annotations

import pytest

from tools.faults.scenarios import partition
from tools.hosts.netns import unavailable

pytestmark = pytest.mark.e2e  # real processes


@pytest.mark.timeout(600)
def test_partition_is_noticed_and_training_resumes_after_the_heal(tmp_path):
    why = unavailable()
    if why:
        pytest.skip(f"namespace hosts cannot be made here: {why}")
    r = partition(tmp_path, budget=60_000)
    assert r["ran"], r
    # every sampler of host 1 dropped by the registry, within liveness and some slack
    assert r["detect_s"] is not None and r["detect_s"] <= r["liveness_s"] + 10, r
    assert r["rejoin_s"] is not None and r["recover_s"] is not None, r  # back and shipping
    assert r["exit_code"] == 0 and r["best_eval_return"] >= 475, r
    assert r["left_running_on_host_1"] == [], r
    # lost: at most what was in flight, in the bounded kernel buffers and high-water
    # marks of the samplers' connections (at the cut, and at the job's end)
    assert 0 <= r["fragments_lost"] <= 128, r
