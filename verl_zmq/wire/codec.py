"""The codec: `encode(msg) -> frames` and `decode(frames) -> msg`, checking
everything it is handed and raising `WireError`, and nothing else, for anything
malformed."""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import msgpack
import numpy as np

from .messages import (
    _DTYPES,
    INLINE_MAX,
    KINDS,
    MAX_ARRAYS,
    MAX_HEADER_BYTES,
    MAX_MESSAGE_BYTES,
    MAX_NDIM,
    MAX_STR,
    PROTOCOL_VERSION,
    LazyArrays,
    Message,
    WireError,
)
from .schema import _HAS_ARRAYS, _SCHEMAS, _check_fields, _v_float, _v_int, _v_str

# --------------------------------------------------------------------------- codec


_PLAIN = (int, float, str, bool)


def _to_plain(v):
    if dataclasses.is_dataclass(v):
        return {f.name: _to_plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
    if isinstance(v, list):
        return [_to_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _to_plain(x) for k, x in v.items()}
    return v


def encode(msg: Message, t: float | None = None) -> list:
    """Turn a message into frames for `send_multipart(frames, copy=False)`.

    Arrays above INLINE_MAX are handed over as their own frame without a copy;
    the caller must not modify them until the message is sent.
    """
    kind = msg.KIND
    fields: dict[str, Any] = {}
    for name in _SCHEMAS[kind]:
        v = getattr(msg, name)
        fields[name] = v if type(v) in _PLAIN else _to_plain(v)
    frames: list = [b""]
    specs = []
    if _HAS_ARRAYS[kind]:
        arrays = msg.arrays
        if type(arrays) is LazyArrays:  # forwarding: reuse the received buffers
            for name, dt, shape, buf in arrays.raw():
                if len(buf) <= INLINE_MAX:
                    specs.append((name, dt, shape, bytes(buf)))
                else:
                    specs.append((name, dt, shape, len(frames)))
                    frames.append(buf)
        else:
            for name, arr in arrays.items():
                if type(arr) is not np.ndarray:
                    arr = np.asarray(arr)
                if arr.dtype.byteorder == ">":
                    arr = arr.astype(arr.dtype.newbyteorder("<"))
                if not arr.flags.c_contiguous:
                    arr = np.ascontiguousarray(arr)
                if arr.nbytes <= INLINE_MAX:
                    specs.append((name, arr.dtype.str, arr.shape, arr.tobytes()))
                else:
                    specs.append((name, arr.dtype.str, arr.shape, len(frames)))
                    frames.append(arr.data)
    header = {
        "v": PROTOCOL_VERSION,
        "k": int(kind),
        "src": msg.src,
        "seq": msg.seq,
        "t": time.time() if t is None else t,
        "f": fields,
        "a": specs,
    }
    frames[0] = msgpack.packb(header, use_bin_type=True)
    return frames


def _buffer(frame) -> memoryview:
    buf = getattr(frame, "buffer", None)  # zmq.Frame received with copy=False
    if buf is None:
        buf = frame
    try:
        mv = memoryview(buf)
    except TypeError:
        raise WireError(f"frame of type {type(frame).__name__} is not a buffer") from None
    return mv.cast("B") if mv.ndim != 1 or mv.format != "B" else mv


def decode(frames) -> Message:
    """Check and turn frames into a message; raise WireError for anything malformed."""
    try:
        return _decode(frames)
    except WireError:
        raise
    except Exception as e:  # defence in depth: nothing else may escape
        raise WireError(f"malformed message: {type(e).__name__}: {e}"[:300]) from None


def _decode(frames) -> Message:  # noqa: C901 - a linear list of checks
    if not isinstance(frames, list | tuple) or not frames:
        raise WireError("expected a non-empty list of frames")
    if len(frames) > MAX_ARRAYS + 1:
        raise WireError(f"too many frames: {len(frames)}")
    bufs = [_buffer(f) for f in frames]
    if sum(b.nbytes for b in bufs) > MAX_MESSAGE_BYTES:
        raise WireError("message above the size limit")
    if bufs[0].nbytes > MAX_HEADER_BYTES:
        raise WireError("header above the size limit")
    try:
        h = msgpack.unpackb(bufs[0], raw=False, strict_map_key=True, use_list=True,
                            max_bin_len=MAX_HEADER_BYTES, max_str_len=MAX_HEADER_BYTES)
    except Exception as e:
        raise WireError(f"header is not msgpack: {type(e).__name__}") from None
    if type(h) is not dict:
        raise WireError("header is not a map")
    if h.get("v") != PROTOCOL_VERSION or type(h.get("v")) is not int:
        raise WireError(f"protocol version {str(h.get('v'))[:20]!r}, expected {PROTOCOL_VERSION}")
    extra = set(h) - {"v", "k", "src", "seq", "t", "f", "a"}
    if extra:
        raise WireError(f"unknown header keys {sorted(map(str, extra))[:4]}")
    k = h.get("k")
    if type(k) is not int or k not in KINDS:
        raise WireError(f"unknown kind {str(k)[:20]!r}")
    cls = KINDS[k]
    where = cls.__name__
    fields = h.get("f", {})
    if type(fields) is not dict:
        raise WireError(f"{where}: fields are not a map")
    kwargs = _check_fields(_SCHEMAS[k], fields, where)
    kwargs["src"] = _v_str(h.get("src", ""), f"{where}.src")
    kwargs["seq"] = _v_int(h.get("seq", 0), f"{where}.seq")
    kwargs["t"] = _v_float(h.get("t", 0.0), f"{where}.t")
    if not math.isfinite(kwargs["t"]):
        raise WireError(f"{where}.t: not finite")
    specs = h.get("a", [])
    if type(specs) is not list or len(specs) > MAX_ARRAYS:
        raise WireError(f"{where}: bad array list")
    if specs and not _HAS_ARRAYS[k]:
        raise WireError(f"{where}: carries no arrays")
    if _HAS_ARRAYS[k]:
        kwargs["arrays"] = _decode_arrays(specs, bufs, where)
    elif len(bufs) > 1:
        raise WireError(f"{where}: {len(bufs) - 1} unexpected frames")
    return cls(**kwargs)


_SPECS: dict[tuple, tuple[np.dtype, tuple, int]] = {}  # validated descriptions, bounded


def _check_spec(name, dt, shape, where: str) -> tuple[np.dtype, tuple, int]:
    """Validate one array description; (dtype, shape tuple, byte count)."""
    if type(name) is not str or len(name) > MAX_STR:
        raise WireError(f"{where}: bad array name")
    dtype = _DTYPES.get(dt) if type(dt) is str else None
    if dtype is None:
        raise WireError(f"{where}.{name}: dtype {str(dt)[:16]!r} not allowed")
    if len(shape) > MAX_NDIM:
        raise WireError(f"{where}.{name}: bad shape")
    count = 1
    for d in shape:
        if type(d) is not int or d < 0 or d > MAX_MESSAGE_BYTES:
            raise WireError(f"{where}.{name}: bad shape")
        count *= d
    return dtype, tuple(shape), count * dtype.itemsize


def _decode_arrays(specs: list, bufs: list, where: str) -> LazyArrays:
    arrays: dict[str, tuple] = {}
    used = set()
    for spec in specs:
        if type(spec) is not list or len(spec) != 4:
            raise WireError(f"{where}: bad array description")
        name, dt, shape, data = spec
        if type(shape) is not list:
            raise WireError(f"{where}: bad shape")
        # Descriptions repeat message after message: a validated one is looked up.
        # A key equal to a validated key (2.0 == 2, True == 1) maps to the validated
        # dtype and shape, never to what was received, so the cache cannot be fooled.
        try:
            key = (name, dt, *shape)
            hit = _SPECS.get(key)
        except TypeError:  # an unhashable element: validation below refuses it
            key, hit = None, None
        if hit is None:
            hit = _check_spec(name, dt, shape, where)
            if key is not None and len(_SPECS) < 4096:
                _SPECS[key] = hit
        dtype, shp, nbytes = hit
        if name in arrays:
            raise WireError(f"{where}: array {name[:40]!r} twice")
        if type(data) is bytes:
            buf = data
        elif type(data) is int and 1 <= data < len(bufs) and data not in used:
            used.add(data)
            buf = bufs[data]
        else:
            raise WireError(f"{where}.{name}: bad data reference")
        if len(buf) != nbytes:
            raise WireError(f"{where}.{name}: {len(buf)} bytes for shape {list(shp)} x {dt}")
        arrays[name] = (dtype, shp, buf)
    if len(used) != len(bufs) - 1:
        raise WireError(f"{where}: {len(bufs) - 1 - len(used)} frames not described")
    return LazyArrays(arrays)
