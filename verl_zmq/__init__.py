"""verl-zmq: asynchronous distributed actor-learner RL over ZeroMQ.

This module and `verl_zmq.config` import nothing heavy: the launcher reads job
files through them and must start in a fraction of a second.
"""

__version__ = "0.1.0"
