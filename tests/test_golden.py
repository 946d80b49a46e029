"""Behaviour pinned across changes of shape (tests/golden.py): each algorithm's
metrics and policy over three updates on a fixed batch and seed, equal to 1e-6,
and the `--dry-run` plan of every shipped job, identical."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.golden import CASES, GOLDEN, algorithm_case, dry_run_plan, shipped_jobs


def _close(got, want, where: str) -> None:
    if isinstance(want, dict):
        assert sorted(got) == sorted(want), f"{where}: keys {sorted(got)} != {sorted(want)}"
        for k in want:
            _close(got[k], want[k], f"{where}/{k}")
    elif isinstance(want, list):
        assert len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want)):
            _close(g, w, f"{where}[{i}]")
    elif want is None:
        assert got is None, where
    else:
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=where)


@pytest.mark.parametrize("name", sorted(CASES))
def test_an_algorithm_updates_as_pinned(name):
    want = json.loads((GOLDEN / f"algo_{name}.json").read_text())
    _close(algorithm_case(name), want, name)


def test_every_shipped_job_has_its_pinned_plan():
    jobs = shipped_jobs()
    pinned = sorted(p.name.removeprefix("plan_").removesuffix(".txt")
                    for p in GOLDEN.glob("plan_*.txt"))
    assert jobs == pinned, "record new jobs' plans: python -m tests.golden --write JOB"
    for job in jobs:
        assert dry_run_plan(job) == (GOLDEN / f"plan_{job}.txt").read_text(), job
