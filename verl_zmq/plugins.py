"""The families that plug into the core from above it: `verl_zmq.seq` (sequence
tasks, prompt files and the models that answer them) and `verl_zmq.pixels` (the
Catch task). Each registers what it adds when it is imported: gymnasium env
ids, env families (`envs/families.py`), policy kinds and the algorithm a policy
kind trains with (`policy/kinds.py`). The core never names them in an import:
`load()` imports them, once, from FAMILIES, when a registry is first asked, as
gymnasium's entry points load env packages. A family stays torch-free at import:
what it registers imports torch only when called."""

from __future__ import annotations

import importlib

FAMILIES = ("verl_zmq.seq", "verl_zmq.pixels")
_loaded: list[str] = []


def load() -> None:
    """Import every family (once): their registrations are then in place."""
    if _loaded:
        return
    _loaded.append("started")  # a family that asks a registry while it loads: no loop
    for name in FAMILIES:
        importlib.import_module(name)
