"""`verl-launch`'s entry point (and `python -m launcher`): the torch zygote
starts (`early.py`) before the rest of the launcher is imported."""

from __future__ import annotations

import sys

from . import early


def main() -> None:
    early.start(sys.argv[1:])
    try:
        from .cli import main as cli_main

        cli_main()
    finally:
        early.close()
