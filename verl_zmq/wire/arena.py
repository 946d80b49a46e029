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

from .codec import _dec_layout
from .messages import _DTYPES, ALIGN, LazyArrays, WireError


class Arena:
    """The layout of a fixed set of columns in one buffer; `columns()` allocates
    a fresh buffer (never reused: the previous one may still be in flight)."""

    __slots__ = ("layout", "index", "nbytes")

    def __init__(self, columns: list[tuple[str, np.dtype, tuple[int, ...]]]):
        entries = [[name, np.dtype(dt).str, [int(d) for d in shape]]
                   for name, dt, shape in columns]
        self.layout = msgpack.packb(entries, use_bin_type=True)
        # the decoder's own reading of the layout: offsets, padding and checks are
        # then the receiver's by construction, not a second copy of its rule
        try:
            self.index, self.nbytes = _dec_layout(self.layout, "arena")
        except WireError as e:
            raise ValueError(f"these columns cannot travel: {e}") from None

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
