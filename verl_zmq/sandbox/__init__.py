"""Running code that a user's tool or reward hands over, confined: see `run`."""

from .run import Limits, Outcome, confined, run, run_python

__all__ = ["Limits", "Outcome", "confined", "run", "run_python"]
