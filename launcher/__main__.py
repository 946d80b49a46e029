"""`python -m launcher ...` is `verl-launch ...`."""

from .entry import main

main()
