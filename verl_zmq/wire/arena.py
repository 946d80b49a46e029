"""Columns written in place in the buffer they travel in.

A sampler knows the columns of its fragments before it steps (obs, action,
reward, ...: the same names, dtypes and shapes fragment after fragment). An
`Arena` lays them out exactly as the packed form of the wire does (`"p"`: each
column at a multiple of ALIGN, in order), so a fragment is written straight
into one buffer and `encode` sends that buffer as it is: no per-column copy,
no join, no layout built per message. What varies from fragment to fragment
(finished episodes' returns, statistics) travels beside it, described one by
one.
"""

from __future__ import annotations

import msgpack
import numpy as np

from .messages import _DTYPES, ALIGN, LazyArrays


class Arena:
    """The layout of a fixed set of columns in one buffer; `columns()` allocates
    a fresh buffer (never reused: the previous one may still be in flight)."""

    __slots__ = ("key", "layout", "index", "nbytes")

    def __init__(self, columns: list[tuple[str, np.dtype, tuple[int, ...]]]):
        entries, index, off = [], {}, 0
        for name, dtype, shape in columns:
            dtype = np.dtype(dtype)
            if dtype.str not in _DTYPES:
                raise ValueError(f"column {name!r}: dtype {dtype.str} cannot travel")
            if name in index:
                raise ValueError(f"column {name!r} twice")
            shape = tuple(int(d) for d in shape)
            n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            entries.append([name, dtype.str, list(shape)])
            index[name] = (dtype, shape, off, n)
            off += n + (-n % ALIGN)  # as the decoder lays them out
        self.key = tuple((name, np.dtype(dt), tuple(s)) for name, dt, s in columns)
        self.layout = msgpack.packb(entries, use_bin_type=True)
        self.index = index
        self.nbytes = off

    def columns(self) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """(buffer, {name: writable view into it})."""
        blob = np.empty(self.nbytes, np.uint8)
        views = {}
        for name, (dtype, shape, off, n) in self.index.items():
            views[name] = blob[off:off + n].view(dtype).reshape(shape)
            blob[off + n:off + n + (-n % ALIGN)] = 0  # padding: no stale memory sent
        return blob, views

    def message_arrays(self, blob: np.ndarray, views: dict[str, np.ndarray],
                       rest: dict[str, np.ndarray]) -> LazyArrays:
        """The arrays of one message: the columns in `blob` (as `columns()` gave
        them) and `rest`, the arrays outside the arena, each sent on its own."""
        specs, built = {}, dict(views)
        for name, arr in rest.items():
            arr = np.require(arr, requirements="C")
            if arr.dtype.byteorder == ">":
                arr = arr.astype(arr.dtype.newbyteorder("<"))
            if arr.dtype.str not in _DTYPES or name in self.index:
                raise ValueError(f"array {name!r}: {arr.dtype.str}, or also a column")
            built[name] = arr
            specs[name] = (arr.dtype, arr.shape, arr.reshape(-1).view(np.uint8).data)
        out = LazyArrays(specs, (self.layout, blob), self.index)
        out._built.update(built)
        return out
