"""Post-training at toy scale: sequence tasks as envs (`env.py`, `tasks.py`).

Importing this registers the tasks with gymnasium as `verl/Reverse-v0` and
`verl/DigitSum-v0`, each with its lock-step vector env (GRPO groups).
"""

from __future__ import annotations

import gymnasium as gym

IDS = {"verl/Reverse-v0": "reverse", "verl/DigitSum-v0": "digitsum"}

for _id, _task in IDS.items():
    if _id not in gym.registry:
        gym.register(id=_id, entry_point="verl_zmq.seq.env:SeqEnv",
                     vector_entry_point="verl_zmq.seq.env:SeqVectorEnv",
                     kwargs={"task": _task})


def is_sequence_env(env_id: str) -> bool:
    return env_id in IDS


def round_steps(env_id: str, kwargs: dict) -> int:
    """Vector steps of one lock-step round of a sequence env (its fragments must
    hold whole rounds)."""
    from .tasks import make_task

    return make_task(kwargs.get("task", IDS[env_id])).max_response + 1
