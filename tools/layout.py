#!/usr/bin/env python
"""The code's structure as the layout checks read it (tests/test_layout.py):
every module's imports (relative ones resolved, a package's `__init__.py`
included), the circles between modules, and the imports between folders set
against the declared order of floors (LAYERS), where an import from a lower
floor up to a higher one is an up-edge that must be named in UP_EDGES with its
reason.

    python tools/layout.py            # floors, the folder graph, up-edges, circles
    python tools/layout.py --edges    # every import between folders, one a line
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("verl_zmq", "launcher")

# The floors, lowest first: a module may import from its own floor and those
# below. A folder is `verl_zmq.<folder>`; a top-level module of the package is
# its own unit (`verl_zmq.batch`); `launcher` is one unit.
LAYERS: tuple[tuple[str, ...], ...] = (
    # plain data and helpers: no role, no torch
    ("verl_zmq.version", "verl_zmq.plugins", "verl_zmq.log", "verl_zmq.files", "verl_zmq.importing",
     "verl_zmq.blas", "verl_zmq.config", "verl_zmq.fatal", "verl_zmq.sandbox"),
    # bytes on the wire, sockets; spaces, envs and the fragment's layout
    ("verl_zmq.wire", "verl_zmq.comm", "verl_zmq.envs", "verl_zmq.normalize",
     "verl_zmq.batch"),
    # acting and learning without I/O: policies, algorithms, stores, stepping
    ("verl_zmq.policy", "verl_zmq.algos", "verl_zmq.replay", "verl_zmq.sampling",
     "verl_zmq.checkpoint", "verl_zmq.demos"),
    # families that plug into the core: sequence tasks and models, pixels
    ("verl_zmq.seq", "verl_zmq.pixels"),
    # the learner's loop and its feeds
    ("verl_zmq.learning",),
    # processes: the roles, and what follows a role from outside
    ("verl_zmq.roles", "verl_zmq.follow", "verl_zmq.runner"),
    # what a person runs: operator tools, the command line (`verl`, and the fork
    # server that runs its roles), the callbacks the launcher calls
    ("verl_zmq.ops", "verl_zmq.cli", "verl_zmq.forkserver", "verl_zmq.callbacks"),
    ("launcher",),
    # the Python API, which launches jobs, and the package's front door to it
    ("verl_zmq.api", "verl_zmq"),
)

# Imports that run up the floors, each with why it stays (unit -> unit: reason).
UP_EDGES: dict[tuple[str, str], str] = {}


def module_name(path: Path) -> str:
    """`verl_zmq/algos/__init__.py` -> `verl_zmq.algos`; `.../ppo.py` -> `...ppo`."""
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def imports(path: Path, root: Path = ROOT, modules: set[str] | None = None) -> set[str]:
    """Modules a file imports, absolute (relative imports resolved against its
    package: a package's own for its `__init__.py`), at any depth (a function's
    imports too), but those under `if TYPE_CHECKING:` (for the type checker only:
    they never run). With `modules` (the tree's), `from pkg import name` is the
    module `pkg.name` where there is one, else `pkg` (a name its `__init__`
    defines); without, both."""
    mod = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
    pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    out: set[str] = set()
    tree = ast.parse(path.read_text())
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
                   for stmt in node.body for n in ast.walk(stmt)}
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")
                base = base[: len(base) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            subs = {f"{name}.{a.name}" for a in node.names}
            if modules is None:
                out |= {name, *subs}
            else:
                found = subs & modules
                out |= found | ({name} if len(found) < len(subs) else set())
    return out


def sources(root: Path = ROOT, packages: Iterable[str] = PACKAGES) -> Iterator[Path]:
    for pkg in packages:
        yield from sorted((root / pkg).rglob("*.py"))


def module_graph(root: Path = ROOT, packages: Iterable[str] = PACKAGES) -> dict[str, set[str]]:
    """module -> the modules of the tree it imports (a package is its `__init__`)."""
    mods = {".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): p
            for p in sources(root, packages)}
    names = set(mods)
    return {m: {i for i in imports(p, root, names) if i in mods and i != m}
            for m, p in mods.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Import circles between modules: each strongly connected group of more than
    one module (Tarjan), as a path around it from its first module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph) + 100))
    try:
        for v in sorted(graph):
            if v not in index:
                connect(v)
    finally:
        sys.setrecursionlimit(limit)
    return [_path_around(g, graph) for g in groups]


def _path_around(group: list[str], graph: dict[str, set[str]]) -> list[str]:
    """A shortest path from the group's first module back to it, inside the group."""
    start, members = group[0], set(group)
    prev: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & members):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return [*reversed(path), start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return group


def unit(module: str) -> str:
    """The floor unit a module belongs to: a folder of the package, a top-level
    module of it, or the launcher."""
    parts = module.split(".")
    if parts[0] == "launcher":
        return "launcher"
    return ".".join(parts[:2])


def floor(u: str) -> int:
    for i, units in enumerate(LAYERS):
        if u in units:
            return i
    raise KeyError(f"{u} is on no floor of tools/layout.py's LAYERS")


def unit_edges(graph: dict[str, set[str]]) -> dict[tuple[str, str], list[str]]:
    """(unit, unit) -> the module imports behind it, for imports between units."""
    out: dict[tuple[str, str], list[str]] = {}
    for m, deps in graph.items():
        for d in deps:
            a, b = unit(m), unit(d)
            if a != b:
                out.setdefault((a, b), []).append(f"{m} -> {d}")
    return out


def up_edges(graph: dict[str, set[str]]) -> dict[tuple[str, str], list[str]]:
    """The edges between units that go from a lower floor to a higher one."""
    return {e: why for e, why in unit_edges(graph).items() if floor(e[0]) < floor(e[1])}


ROLE_CONSTANTS = ("REGISTRY", "SAMPLER", "REPLAY", "LEARNER", "EVALUATOR", "PEER")


def role_decisions(source: str, roles: set[str],
                   constants: Iterable[str] = ROLE_CONSTANTS) -> list[int]:
    """Lines where a role's name decides something: compared with (a literal, or a
    name bound to a role's constant, `p.role == SAMPLER`), or one of several role
    names in a tuple, list, set or dict's keys (`role in (SAMPLER, EVALUATOR)`)."""
    consts = set(constants)

    def is_role(e: ast.AST) -> bool:
        if isinstance(e, ast.Constant):
            return e.value in roles
        if isinstance(e, ast.Name):
            return e.id in consts
        return isinstance(e, ast.Attribute) and e.attr in consts

    def names(node: ast.AST) -> int:
        items = getattr(node, "elts", None) or getattr(node, "keys", None) or []
        return sum(e is not None and is_role(e) for e in items)

    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            ops = [node.left, *node.comparators]
            if any(is_role(o) or names(o) for o in ops):
                lines.append(node.lineno)
        elif isinstance(node, ast.Tuple | ast.List | ast.Set | ast.Dict) and names(node) >= 2:
            lines.append(node.lineno)
    return sorted(set(lines))


PROBED = ("params", "feed")  # what nothing may probe with getattr or hasattr


def probes(source: str, probed: Iterable[str] = PROBED) -> list[int]:
    """Lines that probe an algorithm's params or a feed with getattr/hasattr: the
    object itself (`getattr(self.params, ...)`), or a name bound to it in the same
    function or module (`p = job.algorithm.params; getattr(p, ...)`)."""
    watched = tuple(probed)

    def named(e: ast.AST) -> bool:
        last = e.attr if isinstance(e, ast.Attribute) else e.id if isinstance(e, ast.Name) \
            else ""
        return any(last == w or last.endswith("_" + w) for w in watched)

    lines = []
    tree = ast.parse(source)
    scopes = [tree, *(n for n in ast.walk(tree)
                      if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda))]
    for scope in scopes:
        aliases: set[str] = set()
        for node in ast.walk(scope):
            if isinstance(node, ast.Assign) and named(node.value):
                aliases |= {t.id for t in node.targets if isinstance(t, ast.Name)}
            elif isinstance(node, ast.NamedExpr) and named(node.value):
                aliases.add(node.target.id)
        for node in ast.walk(scope):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in ("getattr", "hasattr") and node.args:
                first = node.args[0]
                if named(first) or (isinstance(first, ast.Name) and first.id in aliases):
                    lines.append(node.lineno)
    return sorted(set(lines))


def raw_connects(source: str) -> list[int]:
    """Lines that connect a socket of a ZeroMQ pattern directly (`x.connect(zmq.PUSH,
    ...)`) instead of through an edge of the declared data flow (`connect_edge`)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "connect" and node.args \
                and ast.unparse(node.args[0]).startswith("zmq."):
            lines.append(node.lineno)
    return lines


def edges_connected(source: str) -> list[tuple[int, str]]:
    """(line, the edge's name as written) of every `connect_edge(EDGE, ...)`."""
    return [(node.lineno, ast.unparse(node.args[0])) for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "connect_edge" and node.args]


def main() -> None:
    graph = module_graph()
    if sys.argv[1:] == ["--edges"]:
        for (a, b), via in sorted(unit_edges(graph).items()):
            print(f"{a} -> {b}  ({len(via)})")
        return
    print("floors (lowest first):")
    for i, units in enumerate(LAYERS):
        print(f"  {i}: {', '.join(u.removeprefix('verl_zmq.') for u in units)}")
    edges = unit_edges(graph)
    print(f"\nimports between units: {len(edges)}")
    up = up_edges(graph)
    print(f"up-edges (a lower floor importing a higher one): {len(up)}")
    for (a, b), via in sorted(up.items()):
        why = UP_EDGES.get((a, b), "NOT JUSTIFIED")
        print(f"  {a} -> {b}: {why}")
        for v in sorted(via):
            print(f"      {v}")
    found = circles(graph)
    print(f"\ncircles between modules: {len(found)}")
    for c in found:
        print("  " + " -> ".join(c))


if __name__ == "__main__":
    main()
