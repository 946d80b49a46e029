"""CPU affinity per role: learners that ask for cores get their own, counted from
the host's last core; everyone else on that host keeps off them; too few cores
and nobody is pinned."""

from __future__ import annotations

import os

import pytest

from launcher.affinity import cpu_specs
from launcher.hosts import load_hosts
from launcher.plan import make_plan
from tests.conftest import CONFIGS
from verl_zmq.config import load_job
from verl_zmq.runner import apply_cpus


def test_learners_reserve_cores_and_the_others_keep_off_them():
    job = load_job(CONFIGS / "cartpole_ppo.toml", ["launch.learners=2"])  # learner cpu = 1
    specs = cpu_specs(job, make_plan(job, load_hosts("local")))
    assert specs["learner-0"] == "2:-1" and specs["learner-1"] == "2:-2"
    assert {specs[m] for m in specs if not m.startswith("learner")} == {"2:"}
    none = load_job(CONFIGS / "cartpole_ppo.toml", ["resources.learner.cpu=0"])
    assert cpu_specs(none, make_plan(none, load_hosts("local"))) == {}
    drains = load_job(CONFIGS / "cartpole_ppo.toml", ["training.learn=false"])  # no updates
    assert cpu_specs(drains, make_plan(drains, load_hosts("local"))) == {}


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux only")
def test_a_role_resolves_its_spec_on_its_own_host():
    before = os.sched_getaffinity(0)
    allowed = sorted(before)
    try:
        if len(allowed) >= 2:
            assert apply_cpus("1:-1") == [allowed[-1]]
            os.sched_setaffinity(0, before)
            assert apply_cpus("1:") == allowed[:-1]
            os.sched_setaffinity(0, before)
        assert apply_cpus(f"{len(allowed)}:-1") is None  # nothing left for the others
        assert apply_cpus("") is None
    finally:
        os.sched_setaffinity(0, before)
