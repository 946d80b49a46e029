"""The layout's invariants (ARCHITECTURE.md), read by `tools/layout.py`: who may
import what, no import circles, no import up the declared floors but the named
ones, small files (a report; the larger ones exempt by name, with why) and
functions, no role that picks its class at construction, no decision by an
algorithm's or a role's name outside their tables, no probe of params or feeds.
Each check also runs on a planted fault it must find."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import PY, ROOT
from tools import layout

MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 60
# files over MAX_FILE_LINES, each with why it is one file (a report, not a reason to
# split a file by its count or shorten its comments)
BIG_FILES: dict[str, str] = {}


def _sources():
    return layout.sources()


def _imports(path) -> set[str]:
    return layout.imports(path)


def _plant(tmp_path, files: dict[str, str]):
    """A tree of modules under tmp_path: {relative path: source}."""
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    return tmp_path


def test_files_and_functions_are_small():
    big = {str(p.relative_to(ROOT)): n for p in _sources()
           if (n := len(p.read_text().splitlines())) > MAX_FILE_LINES}
    print("files over", MAX_FILE_LINES, "lines:", big)  # the report
    assert set(big) <= set(BIG_FILES), f"over {MAX_FILE_LINES} lines, not in BIG_FILES: " \
        f"{sorted(set(big) - set(BIG_FILES))}"
    long = []
    for p in _sources():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{p.relative_to(ROOT)}:{node.lineno} {node.name} ({n})")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def test_roles_choose_no_class_and_nobody_tests_an_algorithm_name():
    for p in (ROOT / "verl_zmq" / "roles").glob("*.py"):
        assert "def __new__" not in p.read_text(), p
    literal = re.compile(r"algorithm\.name\s*(==|!=|in\b|not in\b)")
    offenders = [str(p.relative_to(ROOT)) for p in _sources()
                 if literal.search(p.read_text())]
    assert not offenders, f"compare algorithm.name with a literal: {offenders}"


def test_who_may_import_what():
    rules = {  # a module under the key may not import anything under these
        "verl_zmq.roles": ("verl_zmq.ops", "launcher"),
        "launcher": ("verl_zmq.roles",),  # the launcher starts roles, it does not import them
        "verl_zmq.seq": ("verl_zmq.roles", "verl_zmq.learning"),  # tasks reach no role
        "verl_zmq.policy": ("verl_zmq.roles", "verl_zmq.learning", "zmq"),
        "verl_zmq.envs": ("verl_zmq.roles", "verl_zmq.learning", "torch", "zmq"),
        "verl_zmq.comm": ("verl_zmq.roles", "verl_zmq.learning", "torch"),
        "verl_zmq.sampling": ("verl_zmq.roles", "verl_zmq.learning", "torch"),
        "verl_zmq.learning": ("verl_zmq.roles", "verl_zmq.ops", "launcher"),
        "verl_zmq.replay": ("verl_zmq.roles", "verl_zmq.learning", "verl_zmq.algos.base",
                            "torch", "verl_zmq.ops"),
        "verl_zmq.algos": ("verl_zmq.roles", "verl_zmq.learning", "verl_zmq.ops", "zmq"),
        "verl_zmq.wire": ("verl_zmq.roles", "torch", "zmq"),
        "verl_zmq.config": ("verl_zmq.roles", "torch", "zmq"),
        "verl_zmq.batch": ("torch", "zmq", "verl_zmq.roles"),
        "verl_zmq.algos.exploration": ("torch",),
        "verl_zmq.algos.traits": ("torch",),
    }
    bad = []
    for p in _sources():
        mod = ".".join(p.relative_to(ROOT).with_suffix("").parts)
        for owner, banned in rules.items():
            if mod == owner or mod.startswith(owner + "."):
                bad += [f"{mod} imports {i}" for i in _imports(p)
                        if any(i == b or i.startswith(b + ".") for b in banned)]
    assert not bad, bad


def test_no_import_circles_between_modules():
    assert layout.circles(layout.module_graph()) == []


def test_a_circle_through_a_packages_init_is_found(tmp_path):
    """A relative import in an `__init__.py` resolves against that package (the
    old check took it one level deeper and saw no circle here)."""
    root = _plant(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/alpha/__init__.py": "def f():\n    from ..beta.mod import g\n",
        "pkg/beta/__init__.py": "",
        "pkg/beta/mod.py": "from ..alpha import f\n\ndef g():\n    return f\n",
    })
    assert layout.circles(layout.module_graph(root, ("pkg",))) == [
        ["pkg.alpha", "pkg.beta.mod", "pkg.alpha"]]
    assert layout.imports(root / "pkg" / "alpha" / "__init__.py", root) >= {"pkg.beta.mod"}


def test_imports_run_up_the_floors_only_where_named():
    up = layout.up_edges(layout.module_graph())
    assert set(up) <= set(layout.UP_EDGES), {e: v for e, v in up.items()
                                             if e not in layout.UP_EDGES}
    assert len(layout.UP_EDGES) <= 5


@pytest.mark.e2e
def test_the_registry_shards_samplers_evaluator_and_launcher_import_no_torch():
    # the evaluator also evaluates an MLP policy without it (numpy, as samplers act)
    code = ("import sys; import verl_zmq.roles.registry, verl_zmq.roles.replay, "
            "verl_zmq.roles.sampler, verl_zmq.roles.service, launcher.cli; "
            "from verl_zmq.policy.evaluate import evaluate; "
            "from verl_zmq.policy.numpy_actor import make_actor; "
            "from verl_zmq.config import load_job; "
            "from verl_zmq.envs.make import env_spec; "
            "job = load_job('configs/cartpole_ppo.toml', []); "
            "a = make_actor(job, env_spec(job.environment), (0, 1), (0, 0)); "
            "assert len(evaluate(a, job, None, 2, 0)) == 2; "
            "print('torch' in sys.modules)")
    r = subprocess.run([PY, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stdout + r.stderr
    assert sys.executable


def test_role_names_decide_nothing_outside_the_role_traits_table():
    from verl_zmq.config.roles import ROLES

    table = ROOT / "verl_zmq" / "config" / "roles.py"
    bad = [f"{p.relative_to(ROOT)}:{line}" for p in _sources() if p != table
           for line in layout.role_decisions(p.read_text(), set(ROLES))]
    assert not bad, f"decide by role traits (verl_zmq/config/roles.py), not names: {bad}"


def test_a_role_decision_through_a_constant_is_found():
    from verl_zmq.config.roles import ROLES

    planted = textwrap.dedent("""
        from verl_zmq.config.roles import EVALUATOR, SAMPLER, roles
        def f(p, role):
            if p.role == SAMPLER:
                return 1
            if role in (SAMPLER, EVALUATOR):
                return 2
            return roles.REGISTRY != role
        def g(role):
            return role == "learner"
        """)
    assert layout.role_decisions(planted, set(ROLES)) == [4, 6, 8, 10]


def test_roles_announce_the_endpoints_their_traits_declare():
    from verl_zmq.config.roles import ROLE_TRAITS

    for role, traits in ROLE_TRAITS.items():
        tree = ast.parse((ROOT / "verl_zmq" / "roles" / f"{role}.py").read_text())
        keys = set()
        for node in ast.walk(tree):
            target = node.targets[0] if isinstance(node, ast.Assign) else None
            if isinstance(target, ast.Subscript) and "endpoints" in ast.unparse(target.value):
                keys.add(ast.literal_eval(target.slice))
            if isinstance(target, ast.Attribute) and target.attr == "endpoints" \
                    and isinstance(node.value, ast.Dict):
                keys |= {ast.literal_eval(k) for k in node.value.keys if k is not None}
        assert keys <= set(traits.endpoints), (role, keys)


def test_nothing_probes_params_or_feeds_with_getattr():
    """Algorithm knowledge goes through traits and typed params, feeds through their
    protocol: no getattr or hasattr on them, through any name bound to them."""
    bad = [f"{p.relative_to(ROOT)}:{i}" for p in _sources() for i in layout.probes(p.read_text())]
    assert not bad, bad


def test_a_probe_through_an_alias_is_found():
    planted = textwrap.dedent("""
        def f(job, self):
            p = job.algorithm.params
            if getattr(p, "adv_estimator", None):
                return 1
            q = self.feed
            return hasattr(q, "drain") or getattr(self.params, "x", 0)
        def g(x):
            return getattr(x, "params", None)
        """)
    assert layout.probes(planted) == [4, 7]


def test_every_connection_is_an_edge_of_the_declared_data_flow():
    from verl_zmq.config import wiring

    raw = [f"{p.relative_to(ROOT)}:{i}" for p in _sources() for i in layout.raw_connects(
        p.read_text())]
    assert not raw, f"connect through Transport.connect_edge (config/wiring.py): {raw}"
    used = {name.rsplit(".", 1)[-1] for p in _sources()
            for _, name in layout.edges_connected(p.read_text())}
    declared = {n for n, v in vars(wiring).items() if isinstance(v, wiring.Edge)}
    assert used <= declared, used - declared
    # every ZeroMQ edge is connected somewhere (DIST is torch.distributed's)
    assert {n for n in declared if vars(wiring)[n].pattern != "TCP"} <= used


def test_a_raw_connect_is_found():
    planted = textwrap.dedent("""
        def f(t, ep):
            a = t.connect(zmq.PUSH, ep, hwm=2)
            b = t.connect_edge(FRAGMENTS, ep)
            sock.connect(ep)
        """)
    assert layout.raw_connects(planted) == [3]
    assert layout.edges_connected(planted) == [(4, "FRAGMENTS")]
