"""Catch from pixels (as in bsuite): a ball falls down a rows x cols grid one row a
step; a paddle on the bottom row moves left, stays or moves right; when the ball
reaches the bottom the episode ends with +1 if the paddle is under it, else -1.
The observation is the grid drawn as a uint8 image, `scale` pixels a cell, one
channel (H, W, 1): the ball and the paddle are 255, the rest 0."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class CatchEnv(gym.Env):
    """Catch, rendered to a small uint8 image (see the module)."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, rows: int = 10, cols: int = 5, scale: int = 2,
                 render_mode: str | None = None):
        if rows < 2 or cols < 1 or scale < 1:
            raise ValueError("environment.kwargs: Catch needs rows >= 2, cols >= 1, scale >= 1")
        self.rows, self.cols, self.scale = rows, cols, scale
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Box(0, 255, (rows * scale, cols * scale, 1), np.uint8)
        self.action_space = gym.spaces.Discrete(3)  # left, stay, right
        self.ball = (0, 0)
        self.paddle = 0

    def _image(self) -> np.ndarray:
        grid = np.zeros((self.rows, self.cols), np.uint8)
        grid[self.ball] = 255
        grid[self.rows - 1, self.paddle] = 255
        img = np.kron(grid, np.ones((self.scale, self.scale), np.uint8))
        return img[:, :, None]

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.ball = (0, int(self.np_random.integers(self.cols)))
        self.paddle = int(self.np_random.integers(self.cols))
        return self._image(), {}

    def step(self, action):
        self.paddle = int(np.clip(self.paddle + int(action) - 1, 0, self.cols - 1))
        self.ball = (self.ball[0] + 1, self.ball[1])
        done = self.ball[0] == self.rows - 1
        reward = (1.0 if self.paddle == self.ball[1] else -1.0) if done else 0.0
        return self._image(), reward, done, False, {}

    def render(self):
        return np.repeat(self._image(), 3, axis=2)
