"""A small image task (`catch.py`, registered as `verl/Catch-v0`): what the
convolutional encoders (`policy/cnn.py`) and the Atari preset (`envs/atari.py`)
are tested on. Importing this registers the task with gymnasium; torch-free."""

from __future__ import annotations

import gymnasium as gym

if "verl/Catch-v0" not in gym.registry:
    gym.register(id="verl/Catch-v0", entry_point="verl_zmq.pixels.catch:CatchEnv")
