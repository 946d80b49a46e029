"""The layout's invariants (ARCHITECTURE.md): small files and functions, who may
import what, no role that picks its class at construction, no test of an
algorithm's name outside the algorithms."""

from __future__ import annotations

import ast
import re
import subprocess
import sys

import pytest

from tests.conftest import PY, ROOT

PACKAGES = ("verl_zmq", "launcher")
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 60


def _sources():
    for pkg in PACKAGES:
        yield from sorted((ROOT / pkg).rglob("*.py"))


def _imports(path) -> set[str]:
    """Modules a file imports, absolute (relative imports resolved), at any depth."""
    mod = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    pkg = mod.rsplit(".", 1)[0] if path.name != "__init__.py" else mod
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = pkg.split(".")
            if node.level:
                base = base[: len(base) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            out.add(name)
            out |= {f"{name}.{a.name}" for a in node.names}
    return out


def test_files_and_functions_are_small():
    big = [f"{p.relative_to(ROOT)}: {n}" for p in _sources()
           if (n := len(p.read_text().splitlines())) > MAX_FILE_LINES]
    assert not big, f"files over {MAX_FILE_LINES} lines: {big}"
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
    graph: dict[str, set[str]] = {}
    mods = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
            for p in _sources()}
    for m, p in mods.items():
        graph[m] = {i for i in _imports(p) if i in mods and i != m}
    # a package's __init__ re-exporting its own modules is not a circle
    for m in graph:
        graph[m] = {i for i in graph[m] if not m.startswith(i + ".")}
    seen, stack, circles = set(), [], []

    def visit(m):
        if m in stack:
            circles.append(stack[stack.index(m):] + [m])
            return
        if m in seen:
            return
        seen.add(m)
        stack.append(m)
        for n in sorted(graph[m]):
            visit(n)
        stack.pop()

    for m in sorted(graph):
        visit(m)
    assert not circles, circles


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


def _role_decisions(tree: ast.AST, roles: set[str]) -> list[int]:
    """Lines where a role's name, as a literal, decides something: compared with,
    or one of several role names in a tuple, list, set or dict's keys."""
    def names(node) -> int:
        return sum(isinstance(e, ast.Constant) and e.value in roles
                   for e in getattr(node, "elts", None) or getattr(node, "keys", None) or [])

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            ops = [node.left, *node.comparators]
            if any(isinstance(o, ast.Constant) and o.value in roles for o in ops) \
                    or any(names(o) for o in ops):
                lines.append(node.lineno)
        elif isinstance(node, ast.Tuple | ast.List | ast.Set | ast.Dict) and names(node) >= 2:
            lines.append(node.lineno)
    return lines


def test_role_names_decide_nothing_outside_the_role_traits_table():
    from verl_zmq.config.roles import ROLES

    table = ROOT / "verl_zmq" / "config" / "roles.py"
    bad = [f"{p.relative_to(ROOT)}:{line}" for p in _sources() if p != table
           for line in _role_decisions(ast.parse(p.read_text()), set(ROLES))]
    assert not bad, f"decide by role traits (verl_zmq/config/roles.py), not names: {bad}"


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
    """Algorithm knowledge goes through traits, feeds through their protocol."""
    probe = re.compile(r"getattr\([^,()]*\b(params|feed)\b")
    bad = [f"{p.relative_to(ROOT)}:{i}" for p in _sources()
           for i, line in enumerate(p.read_text().splitlines(), 1) if probe.search(line)]
    assert not bad, bad
