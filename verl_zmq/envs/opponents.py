"""Scripted players for board games, as fixed policies or references of a
multi-agent job (`multiagent.policies.NAME.fixed`, `multiagent.references`):
`module:fn(observation, agent_id) -> action`. Numpy only.

`connect_four_lookahead` plays PettingZoo's Connect Four (`connect_four_v3`)
one move deep: it wins when it can, blocks the opponent's winning move when it
must, and otherwise plays a legal column at random: drawn from the player's own
generator when it is given one (`rng`, as a multi-agent job's fixed players and
references are: games differ, and repeat with the job's seed), else seeded by the
board (a position is always answered alike). `connect_four_greedy` wins when it
can and never blocks."""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np

ROWS, COLS = 6, 7


def _drop(board: np.ndarray, col: int) -> int:
    """The row a piece dropped in `col` lands in (-1: the column is full)."""
    empty = np.flatnonzero((board[:, col, 0] == 0) & (board[:, col, 1] == 0))
    return int(empty.max()) if empty.size else -1


def _wins(pieces: np.ndarray, r: int, c: int) -> bool:
    """Whether `pieces` (6 x 7, 1 where a piece is) holds four in a line through (r, c)."""
    for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
        n = 1
        for s in (1, -1):
            rr, cc = r + s * dr, c + s * dc
            while 0 <= rr < ROWS and 0 <= cc < COLS and pieces[rr, cc]:
                n += 1
                rr, cc = rr + s * dr, cc + s * dc
        if n >= 4:
            return True
    return False


def connect_four_lookahead(obs: Any, agent: str, rng: np.random.Generator | None = None) -> int:
    """Win now if possible, else block the opponent's win, else a random legal move."""
    return _one_move_deep(obs, (0, 1), rng)


def connect_four_greedy(obs: Any, agent: str, rng: np.random.Generator | None = None) -> int:
    """Win now if possible, else a random legal move: it never blocks (a sparring
    partner that punishes a three left open, unlike a random player)."""
    return _one_move_deep(obs, (0,), rng)


def _one_move_deep(obs: Any, whose: tuple[int, ...], rng: np.random.Generator | None) -> int:
    """The first move that completes four for `whose` (0: mine, 1: the
    opponent's, to block), else a legal column at random (from `rng`, or seeded
    by the board)."""
    board = np.asarray(obs["observation"])  # [6, 7, 2]: mine, the opponent's
    legal = np.flatnonzero(np.asarray(obs["action_mask"]))
    for who in whose:  # my winning move first, then the one to block
        for col in legal:
            r = _drop(board, int(col))
            if r < 0:
                continue
            pieces = board[:, :, who].copy()
            pieces[r, col] = 1
            if _wins(pieces, r, int(col)):
                return int(col)
    if rng is None:
        rng = np.random.default_rng(zlib.crc32(board.tobytes()))
    return int(rng.choice(legal))
