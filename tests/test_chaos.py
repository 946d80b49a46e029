"""A short chaos run on the CartPole PPO job (`tools/faults/chaos.py`): one SIGABRT
(how a libzmq assertion ends a process) to each kind of role (sampler, replay
shard, learner, evaluator, registry) at seeded moments; each is restarted (the
learner on its warm spare, which resumes from the learner's snapshot, not from
version 1) and training recovers; the job then reaches its target."""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import PY, ROOT

pytestmark = pytest.mark.e2e  # real processes


@pytest.mark.timeout(900)
def test_every_kind_killed_once_recovers_and_the_job_reaches_its_target():
    r = subprocess.run([PY, str(ROOT / "tools" / "faults" / "chaos.py"), "--seed", "1",
                        "--signal", "ABRT"], cwd=ROOT, capture_output=True, text=True,
                       timeout=880)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    rows = [line.split() for line in r.stdout.splitlines()
            if line.split()[:1] and line.split()[0] in
            ("sampler", "replay", "learner", "evaluator", "registry")]
    assert sorted(row[0] for row in rows) == ["evaluator", "learner", "registry", "replay",
                                              "sampler"]
    assert all(row[3] == "True" and row[5] != "NOT" for row in rows), r.stdout
    # the learner is killed once its warm spare is up: the spare takes over
    learner = [row for row in rows if row[0] == "learner"]
    assert [row[4] for row in learner] == ["True"], r.stdout
    # "version, env steps: before -> at the first update": it continues, not from 1
    after = r.stdout.split("learner", 1)[1].splitlines()[0].split("->")[1].split(",")
    assert int(after[0]) > 1, r.stdout
    assert "recovered 5/5" in r.stdout and "reached" in r.stdout
