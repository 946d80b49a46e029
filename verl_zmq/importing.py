"""Objects named by import path in a job (`module:name`): imported, never evaluated."""

from __future__ import annotations

import importlib


def load_object(path: str, what: str):
    """The object `path` names; ValueError naming `what` (the job key) when it cannot
    be imported."""
    mod, _, name = path.partition(":")
    if not mod or not name:
        raise ValueError(f"{what} {path!r}: expected module:name")
    try:
        return getattr(importlib.import_module(mod), name)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"{what} {path!r}: cannot import: {e}") from None
