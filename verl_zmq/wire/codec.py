"""The codec: `encode(msg) -> frames` and `decode(frames) -> msg`, checking
everything it is handed and raising `WireError`, and nothing else, for anything
malformed."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Iterable
from typing import Any

import msgpack
import numpy as np

from .messages import (
    _DTYPES,
    ALIGN,
    INLINE_MAX,
    KINDS,
    MAX_ARRAYS,
    MAX_HEADER_BYTES,
    MAX_MESSAGE_BYTES,
    MAX_NDIM,
    MAX_STR,
    PROTOCOL_VERSION,
    Kind,
    LazyArrays,
    Message,
    WireError,
)
from .schema import _HAS_ARRAYS, _SCHEMAS, _check_fields, _v_float, _v_int, _v_str

# --------------------------------------------------------------------------- codec


_PLAIN = (int, float, str, bool)


def _to_plain(v: Any) -> Any:
    if dataclasses.is_dataclass(v):
        return {f.name: _to_plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
    if isinstance(v, list):
        return [_to_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _to_plain(x) for k, x in v.items()}
    return v


def encode(msg: Message, t: float | None = None) -> list[Any]:
    """Turn a message into frames for `send_multipart(frames, copy=False)`.

    Arrays above INLINE_MAX are handed over as their own frame without a copy;
    the caller must not modify them until the message is sent.
    """
    kind = msg.KIND
    fields: dict[str, Any] = {}
    for name in _SCHEMAS[kind]:
        v = getattr(msg, name)
        fields[name] = v if type(v) in _PLAIN else _to_plain(v)
    frames: list[Any] = [b""]
    specs: list[Any] = []
    packed: list[Any] | None = None
    if _HAS_ARRAYS[kind]:
        arrays = msg.arrays  # type: ignore[attr-defined]  # the kinds _HAS_ARRAYS names
        if type(arrays) is LazyArrays:  # forwarding: reuse the received buffers
            if arrays.packed is not None:
                packed = [arrays.packed[0], len(frames)]
                frames.append(arrays.packed[1])
            for name, (dt, shape, buf) in arrays.unpacked():
                if len(buf) <= INLINE_MAX:
                    specs.append((name, dt.str, shape, bytes(buf)))
                else:
                    specs.append((name, dt.str, shape, len(frames)))
                    frames.append(buf)
        elif kind in _PACK_KINDS and (packed := _pack(arrays, frames, specs)) is not None:
            pass
        else:
            _per_array(arrays.items(), frames, specs)
    header = {
        "v": PROTOCOL_VERSION,
        "k": int(kind),
        "src": msg.src,
        "seq": msg.seq,
        "t": time.time() if t is None else t,
        "f": fields,
        "a": specs,
    }
    if packed is not None:
        header["p"] = packed
    frames[0] = msgpack.packb(header, use_bin_type=True)
    return frames


def _per_array(items: Iterable[tuple[str, Any]], frames: list[Any], specs: list[Any]) -> None:
    """Each array described on its own: inline bytes when small, else a frame."""
    for name, arr in items:
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


# Experience travels packed: the small arrays of a fragment or batch are copied
# once into one frame, described by a layout (msgpack of [[name, dtype, shape],
# ...]) that repeats message after message, so both ends look it up instead of
# handling each array. Large arrays still travel as frames of their own.
_PACK_KINDS = frozenset({Kind.FRAGMENT, Kind.BATCH, Kind.GOSSIP_BATCH})
EncLayout = tuple[bytes, tuple[int, ...], tuple[bool, ...], bool]
_ENC_LAYOUTS: dict[tuple[Any, ...], EncLayout | None] = {}
_ZEROS = b"\0" * ALIGN
_COPY_MAX = 8192


def _enc_layout(key: tuple[Any, ...]) -> EncLayout | None:
    """(layout bytes, padding after each array, which travel as frames, whether there
    is neither padding nor a large array), or None when the arrays are not plain
    little-endian allowed dtypes (the per-array path fixes them) or none is small."""
    entries: list[list[Any]] = []
    pads: list[int] = []
    big: list[bool] = []
    off = 0
    for name, dtype, shape in key:
        if dtype.str not in _DTYPES or type(name) is not str:
            return None
        n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        big.append(n > INLINE_MAX)
        if big[-1]:
            pads.append(0)
            continue
        entries.append([name, dtype.str, list(shape)])
        off += n
        pads.append(-off % ALIGN)
        off += pads[-1]
    if not entries:
        return None
    return (bytes(msgpack.packb(entries, use_bin_type=True)), tuple(pads), tuple(big),
            not any(pads) and not any(big))


def _pack(arrays: Any, frames: list[Any], specs: list[Any]) -> list[Any] | None:
    """The packed form of `arrays` into `frames`/`specs`; None when it does not apply."""
    try:
        key = tuple([(name, a.dtype, a.shape) for name, a in arrays.items()])
        hit = _ENC_LAYOUTS[key]
    except (AttributeError, TypeError):  # not all ndarrays: the per-array path
        return None
    except KeyError:
        hit = _enc_layout(key)
        if len(_ENC_LAYOUTS) < 4096:
            _ENC_LAYOUTS[key] = hit
    if hit is None:
        return None
    layout, pads, big, simple = hit
    if simple:  # no padding, no large array: one join of the buffers
        try:
            # tobytes for small arrays: numpy builds a memoryview (`.data`) more
            # slowly than it copies a few kilobytes
            frames.append(b"".join([a.tobytes() if a.nbytes <= _COPY_MAX else a.data
                                    for a in arrays.values()]))
            return [layout, len(frames) - 1]
        except (BufferError, ValueError, TypeError):  # a strided array: the long way
            pass
    parts: list[Any] = []
    large: list[tuple[str, Any]] = []
    for (name, a), pad, b in zip(arrays.items(), pads, big):
        if b:
            large.append((name, a))
            continue
        parts.append(a.data)
        if pad:
            parts.append(_ZEROS[:pad])
    try:
        blob = b"".join(parts)
    except (BufferError, ValueError, TypeError):  # a strided array: made contiguous
        blob = b"".join(np.ascontiguousarray(p).data if isinstance(p, memoryview) else p
                        for p in parts)
    ref = len(frames)
    frames.append(blob)
    _per_array(large, frames, specs)
    return [layout, ref]


def _buffer(frame: Any) -> memoryview:
    if type(frame) is bytes:
        return memoryview(frame)
    buf = getattr(frame, "buffer", None)  # zmq.Frame received with copy=False
    if buf is None:
        buf = frame
    try:
        mv = memoryview(buf)
    except TypeError:
        raise WireError(f"frame of type {type(frame).__name__} is not a buffer") from None
    return mv.cast("B") if mv.ndim != 1 or mv.format != "B" else mv


_limit = MAX_MESSAGE_BYTES  # this process's, raised by allow_params_of


def allow_params_of(nbytes: int) -> int:
    """Raise this process's message size limit (never lower it) to fit params of
    `nbytes` array bytes; the limit. Called with the size of the model a process
    built itself (100M float32 parameters are over the default 256 MiB)."""
    global _limit
    _limit = max(_limit, int(nbytes) + MAX_HEADER_BYTES)
    return _limit


def decode(frames: Any) -> Message:
    """Check and turn frames into a message; raise WireError for anything malformed."""
    try:
        return _decode(frames)
    except WireError:
        raise
    except Exception as e:  # defence in depth: nothing else may escape
        raise WireError(f"malformed message: {type(e).__name__}: {e}"[:300]) from None


_SEQUENCES = (list, tuple)
_HEADER_KEYS = frozenset({"v", "k", "src", "seq", "t", "f", "a", "p"})


def _decode(frames: Any) -> Message:  # noqa: C901 - a linear list of checks
    if not isinstance(frames, _SEQUENCES) or not frames:
        raise WireError("expected a non-empty list of frames")
    if len(frames) > MAX_ARRAYS + 1:
        raise WireError(f"too many frames: {len(frames)}")
    bufs: list[memoryview] = []
    total = 0
    for f in frames:
        b = _buffer(f)
        total += b.nbytes
        bufs.append(b)
    if total > _limit:
        raise WireError(f"message of {total:,} bytes above the size limit ({_limit:,})")
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
    if not h.keys() <= _HEADER_KEYS:
        extra = set(h) - _HEADER_KEYS
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
    src, seq, t = h.get("src", ""), h.get("seq", 0), h.get("t", 0.0)
    if type(src) is not str or len(src) > MAX_STR or type(seq) is not int \
            or type(t) is not float:  # the slow path names what is wrong
        src, seq = _v_str(src, f"{where}.src"), _v_int(seq, f"{where}.seq")
        t = _v_float(t, f"{where}.t")
    if not math.isfinite(t):
        raise WireError(f"{where}.t: not finite")
    kwargs["src"], kwargs["seq"], kwargs["t"] = src, seq, t
    specs = h.get("a", [])
    packed = h.get("p")
    if type(specs) is not list or len(specs) > MAX_ARRAYS:
        raise WireError(f"{where}: bad array list")
    if (specs or packed is not None) and not _HAS_ARRAYS[k]:
        raise WireError(f"{where}: carries no arrays")
    if _HAS_ARRAYS[k]:
        kwargs["arrays"] = _decode_arrays(specs, packed, bufs, where)
    elif len(bufs) > 1:
        raise WireError(f"{where}: {len(bufs) - 1} unexpected frames")
    return cls(**kwargs)


Spec = tuple[np.dtype[Any], tuple[int, ...], int]
_SPECS: dict[tuple[Any, ...], Spec] = {}  # validated descriptions, bounded


def _check_spec(name: Any, dt: Any, shape: Any, where: str) -> Spec:
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
        if type(d) is not int or d < 0 or d > _limit:
            raise WireError(f"{where}.{name}: bad shape")
        count *= d
    return dtype, tuple(shape), count * dtype.itemsize


Index = dict[str, tuple[np.dtype[Any], tuple[int, ...], int, int]]
_DEC_LAYOUTS: dict[bytes, tuple[Index, int]] = {}  # validated packed layouts, bounded


def _dec_layout(layout: Any, where: str) -> tuple[Index, int]:
    """Validate a packed layout: {name: (dtype, shape, offset, nbytes)}, total size."""
    if type(layout) is not bytes:
        raise WireError(f"{where}: bad packed layout")
    hit = _DEC_LAYOUTS.get(layout)
    if hit is not None:
        return hit
    try:
        entries = msgpack.unpackb(layout, raw=False, strict_map_key=True, use_list=True,
                                  max_bin_len=MAX_HEADER_BYTES, max_str_len=MAX_HEADER_BYTES)
    except Exception as e:
        raise WireError(f"{where}: packed layout is not msgpack: {type(e).__name__}") from None
    if type(entries) is not list or not entries or len(entries) > MAX_ARRAYS:
        raise WireError(f"{where}: bad packed layout")
    index: Index = {}
    off = 0
    for entry in entries:
        if type(entry) is not list or len(entry) != 3 or type(entry[2]) is not list:
            raise WireError(f"{where}: bad packed array description")
        dtype, shape, n = _check_spec(entry[0], entry[1], entry[2], where)
        if entry[0] in index:
            raise WireError(f"{where}: array {entry[0][:40]!r} twice")
        index[entry[0]] = (dtype, shape, off, n)
        off += n + (-n % ALIGN)
    hit = (index, off)
    if len(layout) <= 64 * 1024 and len(_DEC_LAYOUTS) < 4096:
        _DEC_LAYOUTS[layout] = hit
    return hit


def _decode_packed(packed: Any, bufs: list[memoryview], where: str,
                   used: set[int]) -> tuple[tuple[bytes, memoryview], Index]:
    """((layout, buffer), index) of the packed arrays: checked, nothing built."""
    if type(packed) is not list or len(packed) != 2:
        raise WireError(f"{where}: bad packed arrays")
    index, total = _dec_layout(packed[0], where)
    ref = packed[1]
    if type(ref) is not int or not 1 <= ref < len(bufs):
        raise WireError(f"{where}: bad packed data reference")
    used.add(ref)
    blob = bufs[ref]
    if len(blob) != total:
        raise WireError(f"{where}: packed data of {len(blob)} bytes, layout needs {total}")
    return (packed[0], blob), index


def _decode_arrays(specs: list[Any], packed: Any, bufs: list[memoryview],
                   where: str) -> LazyArrays:
    arrays: dict[str, tuple[Any, ...]] = {}
    used: set[int] = set()
    keep: tuple[bytes, memoryview] | None = None
    index: Index = {}
    if packed is not None:
        keep, index = _decode_packed(packed, bufs, where, used)
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
        if name in arrays or name in index:
            raise WireError(f"{where}: array {name[:40]!r} twice")
        buf: bytes | memoryview
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
    return LazyArrays(arrays, keep, index)
