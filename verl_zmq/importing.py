"""Objects named by import path in a job (`module:name`): imported, never evaluated.

The folder a command runs in is importable (`cwd_importable`), as `python -m`
makes it, so a module beside the job file works from `verl` and `verl-launch`
as it does from a script; on other hosts it must be importable too (installed,
or in `launch.workdir`, or on PYTHONPATH there).
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
import sys
from collections.abc import Callable
from typing import Any

IMPORTABLE = ("it must be importable by every role: in the folder the job is launched "
              "from, installed (pip install -e), or on PYTHONPATH; on other hosts in "
              "launch.workdir or installed there")


def cwd_importable() -> None:
    """Put the current folder first on sys.path, where a console script (unlike
    `python -m`) leaves it out."""
    cwd = os.getcwd()
    if "" not in sys.path and cwd not in sys.path:
        sys.path.insert(0, cwd)


def plug_in(path: str, what: str, takes: int, shape: str) -> Callable[..., Any]:
    """A function of one's own named by `path` (`module:function`) that takes
    `takes` positional arguments (`shape` says which, for the error); ValueError
    naming `what` (the job key) when it cannot be imported or called so."""
    fn = load_object(path, what)
    if not callable(fn):
        raise ValueError(f"{what} {path!r}: expected a function {shape}, got "
                         f"{type(fn).__name__}")
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without one: trust it
        return fn  # type: ignore[no-any-return]
    params = list(sig.parameters.values())
    star = any(p.kind is p.VAR_POSITIONAL for p in params)
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    if len(required) > takes or (len(positional) < takes and not star):
        raise ValueError(f"{what} {path!r}: takes {len(positional)} argument"
                         f"{'s' if len(positional) != 1 else ''}"
                         f" ({', '.join(p.name for p in positional)}); expected {takes}: "
                         f"{shape}")
    return fn  # type: ignore[no-any-return]


def load_object(path: str, what: str) -> Any:
    """The object `path` names; ValueError naming `what` (the job key) when it cannot
    be imported."""
    mod, _, name = path.partition(":")
    if not mod or not name:
        raise ValueError(f"{what} {path!r}: expected module:name")
    if mod == "__main__":
        raise ValueError(f"{what} {path!r}: an object defined in the running script cannot "
                         f"be imported by the roles (each runs in its own process); move it "
                         f"into a module (mymodule.py beside the script) and name it "
                         f"\"mymodule:{name}\"")
    try:
        module = importlib.import_module(mod)
    except ImportError as e:
        raise ValueError(f"{what} {path!r}: cannot import: {e}; {IMPORTABLE}") from None
    try:
        return getattr(module, name)
    except AttributeError:
        near = difflib.get_close_matches(name, [n for n in dir(module) if not n.startswith("_")],
                                         n=1, cutoff=0.6)
        hint = f" (did you mean {mod}:{near[0]}?)" if near else ""
        raise ValueError(f"{what} {path!r}: module {mod!r} has no {name!r}{hint}") from None
