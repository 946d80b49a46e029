"""Versions that must agree across a job; read from package metadata so that
no heavy module is imported to learn them."""

from __future__ import annotations

import platform
from importlib import metadata

from ..version import __version__

CHECKED = ("verl_zmq", "python", "torch", "gymnasium")
# a member written against the wire alone (no verl_zmq) declares these instead
FOREIGN_CHECKED = ("wire", "gymnasium")


def _dist_version(name: str) -> str:
    try:
        # the local part ("+cpu", "+cu121") names the build, not the API: ignore it
        return metadata.version(name).split("+")[0]
    except metadata.PackageNotFoundError:
        return "missing"


def local_versions() -> dict[str, str]:
    """What this process runs: verl_zmq, Python (major.minor), torch, gymnasium."""
    major, minor, _ = platform.python_version_tuple()
    from ..wire import PROTOCOL_VERSION

    return {
        "wire": str(PROTOCOL_VERSION),
        "verl_zmq": __version__,
        "python": f"{major}.{minor}",
        "torch": _dist_version("torch"),
        "gymnasium": _dist_version("gymnasium"),
    }


def mismatch(mine: dict[str, str], theirs: dict[str, str]) -> str:
    """Empty when they agree, else a sentence naming each difference."""
    # an implementation of the wire of its own shares no code with us: only the
    # protocol and the environments' semantics must agree
    keys = CHECKED if "verl_zmq" in theirs else FOREIGN_CHECKED
    diffs = [
        f"{k} {theirs.get(k, 'missing')} (member) vs {mine.get(k, 'missing')} (registry)"
        for k in keys if theirs.get(k) != mine.get(k)
    ]
    return ("versions differ: " + "; ".join(diffs)) if diffs else ""
