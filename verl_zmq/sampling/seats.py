"""A trained policy's columns in a multi-agent sampler, each with its own time
(`sampling/agents.py` says how rows, NEXT_STEP rows and padding are laid out).
Numpy only."""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from ..batch import AGENT, Layout, bootstrap

Arrays = dict[str, np.ndarray]


def take_rows(obs: Any, idx: np.ndarray) -> Any:
    """Rows of an observation batch (a structured one's columns alike)."""
    return {k: v[idx] for k, v in obs.items()} if isinstance(obs, dict) else obs[idx]


class Seats:
    """A trained policy's columns, each with its own time (see the module)."""

    def __init__(self, layout: Layout, E: int, extras: tuple[str, ...]):
        self.layout, self.E, self.T = layout, E, layout.T
        self.extras = extras
        self.cap = 3 * self.T + 2
        self.fields = [(k, dt, shape[2:]) for k, dt, shape in layout.fields(E)
                       if len(shape) >= 2 and shape[:2] == (self.T, E)]
        self.cols: Arrays = {k: np.zeros((self.cap, E, *shape), dt)
                             for k, dt, shape in self.fields}
        self.n = np.zeros(E, np.int64)  # rows each column holds
        self.open = np.zeros(E, bool)  # its last row waits for its reward and outcome
        self.ep_ret = np.zeros(E, np.float64)
        self.ep_len = np.zeros(E, np.int64)
        self.returns: list[float] = []
        self.lengths: list[int] = []
        self.versions: deque[tuple[int, int]] = deque()  # (rows written, version)

    def _room(self, extra: int = 1) -> None:
        need = int(self.n.max()) + extra
        if need <= self.cap:
            return
        grow = max(need, 2 * self.cap) - self.cap
        for k, a in self.cols.items():
            self.cols[k] = np.concatenate([a, np.zeros((grow, *a.shape[1:]), a.dtype)])
        self.cap += grow

    def _write(self, cols: np.ndarray, obs: Any, action: np.ndarray, extras: Arrays,
               agents: np.ndarray, valid: bool) -> None:
        self._room()
        rows = self.n[cols]
        c = self.cols
        if isinstance(obs, dict):
            for k, v in obs.items():
                c[k][rows, cols] = v
        else:
            c["obs"][rows, cols] = obs
        c["action"][rows, cols] = action
        for k in self.extras:
            c[k][rows, cols] = extras[k]
        c["reward"][rows, cols] = 0.0
        c["terminated"][rows, cols] = False
        c["truncated"][rows, cols] = False
        c["valid"][rows, cols] = valid
        c[AGENT][rows, cols] = agents
        self.n[cols] += 1

    def decide(self, cols: np.ndarray, obs: Any, action: np.ndarray, extras: Arrays,
               agents: np.ndarray) -> None:
        """The agents holding `cols` acted: a row each, open for its reward."""
        self._write(cols, obs, action, extras, agents, True)
        self.open[cols] = True

    def reward(self, col: int, r: float) -> None:
        if self.open[col]:
            self.cols["reward"][self.n[col] - 1, col] += r
            self.ep_ret[col] += r

    def count_step(self, cols: np.ndarray) -> None:
        self.ep_len[cols] += 1

    def end(self, cols: np.ndarray, term: np.ndarray, trunc: np.ndarray, obs: Any,
            action: np.ndarray, extras: Arrays, agents: np.ndarray) -> None:
        """The agents of `cols` ended their episode: their last row says how, and the
        NEXT_STEP row after it holds the last observation and its value (invalid)."""
        keep = self.open[cols]
        if not keep.any():
            return
        idx = np.flatnonzero(keep)
        cols = cols[idx]
        last = self.n[cols] - 1
        self.cols["terminated"][last, cols] = term[idx]
        self.cols["truncated"][last, cols] = trunc[idx]
        self._write(cols, take_rows(obs, idx), action[idx],
                    {k: v[idx] for k, v in extras.items()}, agents[idx], False)
        self.open[cols] = False
        self.returns.extend(self.ep_ret[cols].tolist())
        self.lengths.extend(self.ep_len[cols].tolist())
        self.ep_ret[cols] = 0.0
        self.ep_len[cols] = 0

    def pad(self) -> None:
        """Idle columns behind the others gain an invalid row (no agent)."""
        lag = np.flatnonzero(~self.open & (self.n < self.n.max()))
        if not lag.size:
            return
        self._room()
        rows = self.n[lag]
        for k, a in self.cols.items():
            a[rows, lag] = -1 if k == AGENT else 0
        self.n[lag] += 1

    def ready(self) -> bool:
        return int(self.n.min()) >= self.T + 1

    def take(self, obs_columns: tuple[str, ...]) -> Arrays:
        """The first T rows as a fragment, row T as its bootstrap; rows shift down."""
        T, c = self.T, self.cols
        out: Arrays = {k: a[:T].copy() for k, a in c.items()}
        for k in (*obs_columns, *self.extras):
            out[bootstrap(k)] = c[k][T].copy()
        for a in c.values():
            a[:self.cap - T] = a[T:].copy()
        self.n -= T
        out["ep_return"] = np.array(self.returns, np.float64)
        out["ep_length"] = np.array(self.lengths, np.int64)
        self.returns, self.lengths = [], []
        return out
