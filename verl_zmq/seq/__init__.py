"""Post-training: sequence tasks as envs (`env.py`, `tasks.py`) and prompt files
answered by Hugging Face models, a family that plugs into the core
(`plugins.py`). Importing this registers the tasks with gymnasium as
`verl/Reverse-v0` and `verl/DigitSum-v0`, each with its lock-step vector env
(GRPO groups), and the family's parts in the core's registries (`family.py`).
"""

from __future__ import annotations

import gymnasium as gym

IDS = {"verl/Reverse-v0": "reverse", "verl/DigitSum-v0": "digitsum"}

for _id, _task in IDS.items():
    if _id not in gym.registry:
        gym.register(id=_id, entry_point="verl_zmq.seq.env:SeqEnv",
                     vector_entry_point="verl_zmq.seq.env:SeqVectorEnv",
                     kwargs={"task": _task})

from .family import register  # noqa: E402  (IDS first)

register(IDS)

