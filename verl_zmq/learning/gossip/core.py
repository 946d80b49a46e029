"""Gossip between DAPO peers, free of sockets so it can be tested and simulated:
neighbour selection, the bounded priority queue of received parameters,
mixing, fingerprints, and compression of what travels.

Selection works on whole rounds as arrays ([N, k] neighbour indices), so one
peer (a row) and the scale simulator (every row at once) run the same code.
"""

from __future__ import annotations

import hashlib
import heapq
import importlib
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

# -- neighbour selection -------------------------------------------------------------


def softmax(x: np.ndarray, temperature: float) -> np.ndarray:
    z = np.asarray(x, np.float64) / max(temperature, 1e-8)
    z = z - z.max()
    e = np.exp(z)
    out: np.ndarray = e / e.sum()
    return out


def topology_offsets(topology: str, n: int, k: int, rnd: int) -> list[int]:
    """Offsets j - i of peer i's k neighbours in round `rnd` of a fixed graph.
    ring: +1, -1, +2, -2, ...; exponential (Stochastic Gradient Push): +2^m and
    -2^m, m cycling through 0..log2(n)-1 from round to round."""
    if n <= 1:
        return []
    if topology == "ring":
        cand = [o for d in range(1, n) for o in (d, -d)]
    else:
        levels = max(1, int(np.ceil(np.log2(n))))
        cand = []
        for j in range(levels):
            m = (rnd + j) % levels
            cand += [1 << m, -(1 << m)]
    out: list[int] = []
    for o in cand:  # distinct neighbours, never oneself
        if o % n != 0 and o % n not in {x % n for x in out}:
            out.append(o)
        if len(out) == k:
            break
    return out


def select_round(strategy: str, n: int, k: int, rnd: int, rng: np.random.Generator,
                 rewards: np.ndarray | None = None, temperature: float = 1.0,
                 topology: str = "ring", alive: np.ndarray | None = None) -> np.ndarray:
    """Neighbours of every peer 0..n-1 for one round: [n, k'] indices, k' = min(k,
    live peers - 1). Dead peers are never chosen; a topology's edge to a dead
    peer is skipped (so it may yield fewer than k)."""
    alive = np.ones(n, bool) if alive is None else np.asarray(alive, bool)
    live = np.flatnonzero(alive)
    kk = max(0, min(k, len(live) - 1))
    if kk == 0:
        return np.zeros((n, 0), np.int64)
    if strategy == "topology":
        offs = np.array(topology_offsets(topology, n, kk, rnd), np.int64)
        nb = (np.arange(n)[:, None] + offs[None, :]) % n
        return np.where(alive[nb], nb, -1)  # -1: the edge to a dead peer is skipped
    if strategy == "random":
        # k distinct others, uniformly: argsort of random keys with self and dead last
        keys = rng.random((n, n))
        keys[:, ~alive] = 2.0
        keys[np.arange(n), np.arange(n)] = 3.0
        return np.argsort(keys, axis=1)[:, :kk]
    if strategy == "reward_based":
        p = softmax(_masked(rewards, alive, n), temperature)
        out = np.empty((n, kk), np.int64)
        for i in range(n):
            q = p.copy()
            q[i] = 0.0
            q = q / q.sum()
            out[i] = rng.choice(n, size=kk, replace=False, p=q)
        return out
    raise ValueError(f"gossip.selection_strategy: unknown {strategy!r}")


def _masked(rewards: np.ndarray | None, alive: np.ndarray, n: int) -> np.ndarray:
    r = np.zeros(n) if rewards is None else np.asarray(rewards, np.float64).copy()
    r[~alive] = -1e300  # softmax weight 0
    return r


def reward_selection_probs(rewards: np.ndarray, me: int, temperature: float) -> np.ndarray:
    """The probability that peer `me` picks each other peer first (reward_based)."""
    p = softmax(np.asarray(rewards, np.float64), temperature)
    p[me] = 0.0
    out: np.ndarray = p / p.sum()
    return out


# -- what a peer received, in priority order ------------------------------------------


@dataclass(order=True)
class QueuedParams:
    """Parameters received from a neighbour, waiting to be mixed in."""

    priority: float
    seq: int
    src: str = field(compare=False)
    arrays: dict[str, np.ndarray] = field(compare=False)
    reward: float = field(compare=False, default=0.0)
    version: int = field(compare=False, default=0)
    received_at_update: int = field(compare=False, default=0)


def priority_function(name: str) -> Callable[[QueuedParams], float]:
    """`reward` (higher first), `recency` (newest first) or `module:function`."""
    if name == "reward":
        return lambda e: e.reward
    if name == "recency":
        return lambda e: float(e.seq)
    mod, _, fn = name.partition(":")
    if not fn:
        raise ValueError(f"gossip.priority_fn: {name!r} is not reward, recency or module:function")
    out: Callable[[QueuedParams], float] = getattr(importlib.import_module(mod), fn)
    return out


class ParamQueue:
    """At most `max_size` entries; when full, the lowest priority goes. `drain()`
    returns the entries highest priority first and empties the queue."""

    def __init__(self, max_size: int, priority_fn: str = "reward"):
        self.max_size = max(1, max_size)
        self.fn = priority_function(priority_fn)
        self.heap: list[QueuedParams] = []  # a min-heap: the root is the first to drop
        self.seq = itertools.count()
        self.dropped = 0

    def __len__(self) -> int:
        return len(self.heap)

    def put(self, src: str, arrays: dict[str, np.ndarray], reward: float, version: int,
            at_update: int) -> None:
        e = QueuedParams(0.0, next(self.seq), src, arrays, reward, version, at_update)
        e.priority = float(self.fn(e))
        if len(self.heap) < self.max_size:
            heapq.heappush(self.heap, e)
        elif e > self.heap[0]:
            heapq.heapreplace(self.heap, e)
            self.dropped += 1
        else:
            self.dropped += 1

    def drain(self) -> list[QueuedParams]:
        out = sorted(self.heap, reverse=True)
        self.heap = []
        return out


# -- mixing ---------------------------------------------------------------------------


def mixing_weights(kind: str, rewards: list[float] | np.ndarray, temperature: float = 1.0
                   ) -> np.ndarray:
    """w over the received entries: uniform, or softmax(reward / temperature)."""
    n = len(rewards)
    if n == 0:
        return np.zeros(0)
    if kind == "reward_softmax":
        return softmax(np.asarray(rewards, np.float64), temperature)
    return np.full(n, 1.0 / n)


def mix(theta: np.ndarray, others: np.ndarray, weights: np.ndarray, rate: float) -> np.ndarray:
    """theta <- (1 - a) theta + a sum_j w_j theta_j, batched over leading axes:
    theta [..., d], others [..., k, d], weights [..., k]."""
    if others.shape[-2] == 0:
        return theta
    avg = np.einsum("...k,...kd->...d", weights, others)
    out: np.ndarray = (1.0 - rate) * theta + rate * avg
    return out


def mix_params(theta: dict[str, np.ndarray], entries: list[dict[str, np.ndarray]],
               weights: np.ndarray, rate: float) -> dict[str, np.ndarray]:
    """`mix` for named tensors: each tensor mixed on its own."""
    out = {}
    for k, v in theta.items():
        flat = v.reshape(1, -1).astype(np.float64)
        others = np.stack([e[k].reshape(-1) for e in entries]).astype(np.float64)[None]
        out[k] = mix(flat, others, weights[None], rate).reshape(v.shape).astype(v.dtype)
    return out


def fingerprint(arrays: dict[str, np.ndarray]) -> str:
    """SHA-256 over names, dtypes, shapes and bytes, in name order."""
    h = hashlib.sha256()
    for k in sorted(arrays):
        a = np.ascontiguousarray(arrays[k])
        h.update(f"{k}|{a.dtype.str}|{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def check_like(arrays: dict[str, np.ndarray], reference: dict[str, np.ndarray]) -> str:
    """Empty when `arrays` has exactly the reference's names, shapes and float dtypes."""
    if set(arrays) != set(reference):
        missing, extra = set(reference) - set(arrays), set(arrays) - set(reference)
        return f"names differ (missing {sorted(missing)[:3]}, extra {sorted(extra)[:3]})"
    for k, ref in reference.items():
        a = arrays[k]
        if a.shape != ref.shape:
            return f"{k}: shape {a.shape} != {ref.shape}"
        if a.dtype.kind != "f" or not np.isfinite(a).all():
            return f"{k}: not finite floats ({a.dtype})"
    return ""
