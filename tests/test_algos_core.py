"""The registry of the policy-gradient family's functions (algos/core.py): the
job's names and the registered ones agree, every entry documents itself, an
unknown name is a clear error, and variants compose functions instead of
overriding another algorithm's hooks."""

from __future__ import annotations

import ast
import typing

import pytest
import torch

from tests.conftest import ROOT
from verl_zmq.algos import core, grouped  # noqa: F401 (grouped registers its estimators)
from verl_zmq.config import algo_params


@pytest.mark.parametrize("table, alias", [(core.AGGREGATIONS, algo_params.LossAgg),
                                          (core.KL_ESTIMATORS, algo_params.KLEstimator)])
def test_the_job_keys_accept_exactly_the_registered_names(table, alias):
    assert set(typing.get_args(alias)) == set(table)


def test_every_registered_function_is_documented():
    for table in (core.ADVANTAGE_ESTIMATORS, core.POLICY_LOSSES, core.AGGREGATIONS,
                  core.KL_ESTIMATORS):
        for name, fn in table.items():
            assert (fn.__doc__ or "").strip(), name


def test_an_unknown_name_names_the_key_and_the_choices():
    with pytest.raises(ValueError, match=r"algorithm.params.loss_agg: 'x': expected one of "
                                         r"fragment-mean, seq-mean-token-mean, "):
        core.lookup(core.AGGREGATIONS, "x", "algorithm.params.loss_agg")


def test_step_mean_and_token_mean_are_one_meaning():
    per_step = torch.tensor([1.0, 2.0, 3.0, 10.0])
    mb = {"seq": torch.tensor([0, 0, 0, 1]), "column": torch.tensor([0, 0, 0, 1])}
    assert core.AGGREGATIONS["step-mean"] is core.AGGREGATIONS["token-mean"]
    assert float(core.AGGREGATIONS["token-mean"](per_step, mb, 1.0)) == 4.0
    assert float(core.AGGREGATIONS["seq-mean-token-sum"](per_step, mb)) == 8.0
    assert float(core.AGGREGATIONS["fragment-mean"](per_step, mb)) == 6.0


def test_no_algorithm_overrides_another_algorithms_methods():
    """A variant declares a recipe and adds what is its own; it overrides only the
    algorithm contract (algos/base.py), never another algorithm's hooks."""
    base = ast.parse((ROOT / "verl_zmq" / "algos" / "base.py").read_text())
    contract = {n.name for n in ast.walk(base) if isinstance(n, ast.FunctionDef)}
    defined: dict[str, set[str]] = {}
    parents: dict[str, list[str]] = {}
    for p in sorted((ROOT / "verl_zmq" / "algos").glob("*.py")):
        for node in ast.parse(p.read_text()).body:
            if isinstance(node, ast.ClassDef):
                defined[node.name] = {n.name for n in node.body
                                      if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
                parents[node.name] = [ast.unparse(b) for b in node.bases]
    bad = [f"{cls}.{m} overrides {parent}.{m}" for cls, bases in parents.items()
           for parent in bases if parent in defined and parent != "Algorithm"
           for m in defined[cls] & defined[parent] if m not in contract]
    assert not bad, bad
