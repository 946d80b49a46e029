"""What a role failed for good means for its job (`launcher/fate.py`), and the
registry's port on a machine that runs other jobs (`launcher/ports.py`)."""

from __future__ import annotations

import pytest

from launcher import ports
from launcher.fate import Fate
from launcher.hosts import Host
from launcher.plan import make_plan
from tests.conftest import CONFIGS, free_port_range
from verl_zmq.config import load_job


def _fate(job_file: str, *sets: str) -> tuple[Fate, dict]:
    job = load_job(CONFIGS / job_file, list(sets))
    plan = make_plan(job, [Host("localhost")])
    return Fate(job, plan.placements), {p.member_id: p for p in plan.placements}


def test_a_centralised_job_fails_without_its_centre_or_the_last_of_a_needed_role():
    fate, p = _fate("cartpole_ppo.toml", "sampling.num_workers=3")
    assert fate.fails_job(p["learner-0"]) and fate.fails_job(p["registry"])
    fate.failed += ["sampler-0", "sampler-1"]
    assert not fate.fails_job(p["sampler-1"])  # one sampler still steps envs
    fate.failed.append("sampler-2")
    assert fate.fails_job(p["sampler-2"])
    fate.failed.append("evaluator-0")
    assert fate.fails_job(p["evaluator-0"])  # nothing would evaluate, keep best.pt, end it


def test_a_decentralised_job_fails_only_once_no_peer_can_train():
    fate, p = _fate("cartpole_dapo.toml", "launch.peers=2", "sampling.num_workers=1")
    assert not fate.fails_job(p["registry"])  # no centre
    fate.failed.append("sampler-0")  # peer0's only sampler: peer0 cannot train
    assert not fate.fails_job(p["sampler-0"])
    fate.failed.append("peer-1")
    assert fate.fails_job(p["peer-1"])


def test_the_registry_port_is_the_first_one_no_other_launcher_holds(tmp_path, monkeypatch):
    monkeypatch.setattr(ports, "LOCKS", tmp_path / "locks")
    lo, hi = free_port_range()
    job = load_job(CONFIGS / "cartpole_ppo.toml", [f"launch.port_range=[{lo}, {hi}]"])
    host = Host("localhost")
    first, lock = ports.choose_registry_port(job, host, hold=True, owner="/runs/a")
    assert first == lo
    second, lock2 = ports.choose_registry_port(job, host, hold=True, owner="/runs/b")
    assert second == lo + 1  # another job's launcher holds the first
    ports.release(lock)
    assert ports.choose_registry_port(job, host, hold=False)[0] == lo  # free again
    taken = load_job(CONFIGS / "cartpole_ppo.toml",
                     [f"launch.port_range=[{lo}, {hi}]", f"launch.registry_port={lo + 1}"])
    with pytest.raises(ports.PortTaken, match=f"launch.registry_port {lo + 1} is taken on this "
                                              f"machine by the job of run folder /runs/b"):
        ports.choose_registry_port(taken, host, hold=True)
    ports.release(lock2)


def test_a_remote_registry_keeps_the_first_port_unprobed():
    job = load_job(CONFIGS / "cartpole_ppo.toml")
    assert ports.choose_registry_port(job, Host("node7"), hold=True) == (29500, None)
