"""verl-zmq: asynchronous distributed actor-learner RL over ZeroMQ.

From Python: `verl_zmq.train(job, hosts="local", overrides=None) -> Run`,
`verl_zmq.load_policy(path)` and `verl_zmq.evaluate(path, episodes=10)`
(`verl_zmq/api.py`), and callbacks (`verl_zmq/callbacks.py`). This module and
`verl_zmq.config` import nothing heavy: the launcher reads job files through them
and must start in a fraction of a second, so the entry points are imported when
first used.
"""

from __future__ import annotations

from typing import Any

from .version import __version__

__all__ = ["Run", "Policy", "train", "load_policy", "evaluate", "Callback", "RunState",
           "StopOnReturn", "StopOnNoImprovement", "__version__"]
CALLBACKS = ("Callback", "RunState", "StopOnReturn", "StopOnNoImprovement")


def __getattr__(name: str) -> Any:
    if name in ("Run", "Policy", "train", "load_policy", "evaluate"):
        from . import api

        return getattr(api, name)
    if name in CALLBACKS:
        from . import callbacks

        return getattr(callbacks, name)
    raise AttributeError(f"module 'verl_zmq' has no attribute {name!r}")
