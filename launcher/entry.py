"""`verl-launch`'s entry point (and `python -m launcher`): the torch zygote
starts (`early.py`) before the rest of the launcher is imported."""

from __future__ import annotations

import os
import sys

from . import early


def main() -> None:
    # the folder it runs in is importable (a job's own env module), as `python -m`
    # makes it: for the launcher's checks; its roles are started with -m
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    early.start(sys.argv[1:])
    try:
        from .cli import main as cli_main

        cli_main()
    finally:
        early.close()
