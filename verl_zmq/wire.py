"""The wire: every message kind as a typed dataclass, and the codec.

A message is one ZeroMQ multipart message. Frame 0 is a msgpack map, the
header:

    {"v": PROTOCOL_VERSION, "k": kind, "src": member id, "seq": n, "t": send time,
     "f": {the kind's fields},
     "a": [[name, dtype.str, shape, data], ...]}

where `data` is the array's bytes (msgpack bin, arrays up to INLINE_MAX bytes)
or the index of the frame that holds them (larger arrays, sent zero-copy).

`encode(msg) -> frames` and `decode(frames) -> msg` are the only way in and out.
`decode` checks everything it is handed and raises `WireError`, and nothing
else, for anything malformed: nothing a peer sends is unpickled, evaluated or
decoded through msgpack ext hooks.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import time
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import msgpack
import numpy as np

PROTOCOL_VERSION = 1
INLINE_MAX = 64 * 1024  # arrays above this travel as their own frame
MAX_MESSAGE_BYTES = 256 * 1024 * 1024
MAX_HEADER_BYTES = 32 * 1024 * 1024
MAX_ARRAYS = 512
MAX_NDIM = 8
MAX_STR = 4096
MAX_ITEMS = 65_536
ALLOWED_DTYPES = frozenset(
    ["|b1", "|u1", "|i1", "<u2", "<i2", "<u4", "<i4", "<u8", "<i8", "<f2", "<f4", "<f8"]
)

Arrays = dict  # name -> np.ndarray; a dedicated alias so the codec knows the field
_DTYPES = {s: np.dtype(s) for s in ALLOWED_DTYPES}


class LazyArrays(Mapping):
    """Decoded arrays, checked at decode but built on first access (np.frombuffer,
    no copy). A shard that only forwards a fragment never builds them at all."""

    __slots__ = ("_specs", "_built")

    def __init__(self, specs: dict[str, tuple[np.dtype, tuple, Any]]):
        self._specs = specs
        self._built: dict[str, np.ndarray] = {}

    def __getitem__(self, name: str) -> np.ndarray:
        arr = self._built.get(name)
        if arr is None:
            dtype, shape, buf = self._specs[name]
            arr = (np.empty(shape, dtype) if not len(buf)
                   else np.frombuffer(buf, dtype=dtype).reshape(shape))
            self._built[name] = arr
        return arr

    def __iter__(self):
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)

    def __contains__(self, name) -> bool:
        return name in self._specs

    def raw(self):
        """(name, dtype str, shape, buffer) without building arrays: for re-encoding."""
        for name, (dtype, shape, buf) in self._specs.items():
            yield name, dtype.str, shape, buf

    def __repr__(self) -> str:
        return f"LazyArrays({ {k: (v[0].str, v[1]) for k, v in self._specs.items()} })"


class WireError(Exception):
    """A message that cannot be decoded; the only exception `decode` raises."""


class Kind(enum.IntEnum):
    """Every message kind on the wire (the header's `k`)."""

    REGISTER = 1
    REGISTER_REPLY = 2
    HEARTBEAT = 3
    HEARTBEAT_REPLY = 4
    DEREGISTER = 5
    SNAPSHOT_REQUEST = 6
    MEMBERSHIP_SNAPSHOT = 7
    MEMBERSHIP_DELTA = 8
    FRAGMENT = 9
    SAMPLE_REQUEST = 10
    BATCH = 11
    PRIORITY_UPDATE = 12
    PARAMS = 13
    GOSSIP_HELLO = 14
    GOSSIP_PARAMS = 15
    METRICS = 16
    SHUTDOWN = 17
    ERROR = 18


@dataclass(kw_only=True)
class Member:
    """One member of a job as the registry knows it (not a message by itself)."""

    id: str = ""
    role: str = ""
    group: str = "main"
    incarnation: int = 0
    host: str = ""
    index: int = 0
    endpoints: dict[str, str] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)


@dataclass(kw_only=True)
class Message:
    """Fields every kind carries: sender id, sender's sequence number, send time."""

    KIND: ClassVar[Kind]
    src: str = ""
    seq: int = 0
    t: float = 0.0


@dataclass(kw_only=True)
class Register(Message):
    """Member -> registry: join (or re-join) the job."""

    KIND: ClassVar[Kind] = Kind.REGISTER
    member: Member = field(default_factory=Member)


@dataclass(kw_only=True)
class RegisterReply(Message):
    """Registry -> member: accepted (with a membership snapshot) or refused (`error`)."""

    KIND: ClassVar[Kind] = Kind.REGISTER_REPLY
    ok: bool = True
    error: str = ""
    pub_endpoint: str = ""
    members_seq: int = 0
    members: list[Member] = field(default_factory=list)


@dataclass(kw_only=True)
class Heartbeat(Message):
    """Member -> registry, every heartbeat interval; `status` carries queue depths."""

    KIND: ClassVar[Kind] = Kind.HEARTBEAT
    incarnation: int = 0
    status: dict[str, float] = field(default_factory=dict)


@dataclass(kw_only=True)
class HeartbeatReply(Message):
    """Registry -> member: `known` false asks the member to register again."""

    KIND: ClassVar[Kind] = Kind.HEARTBEAT_REPLY
    known: bool = True
    members_seq: int = 0
    shutdown: str = ""  # non-empty: the job is stopping, for this reason


@dataclass(kw_only=True)
class Deregister(Message):
    """Member -> registry: leaving cleanly."""

    KIND: ClassVar[Kind] = Kind.DEREGISTER
    incarnation: int = 0


@dataclass(kw_only=True)
class SnapshotRequest(Message):
    """Member -> registry: send me the whole membership (a sequence gap was seen)."""

    KIND: ClassVar[Kind] = Kind.SNAPSHOT_REQUEST


@dataclass(kw_only=True)
class MembershipSnapshot(Message):
    """Registry -> member: the whole membership at sequence `members_seq`."""

    KIND: ClassVar[Kind] = Kind.MEMBERSHIP_SNAPSHOT
    members_seq: int = 0
    members: list[Member] = field(default_factory=list)


@dataclass(kw_only=True)
class MembershipDelta(Message):
    """Registry PUB: one change (`join` or `leave`) at sequence `members_seq`."""

    KIND: ClassVar[Kind] = Kind.MEMBERSHIP_DELTA
    members_seq: int = 0
    op: str = "join"
    member: Member = field(default_factory=Member)


@dataclass(kw_only=True)
class Fragment(Message):
    """Sampler -> shard: T steps x E envs of experience, columnar, plus episode stats.

    arrays: obs [T,E,...], action [T,E,...], reward/terminated/truncated/valid [T,E],
    the algorithm's extras [T,E] (`logp`, `value`, ...), bootstrap_obs [E,...] and
    bootstrap_<extra> [E], ep_return/ep_length [n finished episodes].
    """

    KIND: ClassVar[Kind] = Kind.FRAGMENT
    version: int = 0
    arrays: Arrays = field(default_factory=dict)


@dataclass(kw_only=True)
class SampleRequest(Message):
    """Learner -> shard: `credit` more batches may be sent (credit-based flow control)."""

    KIND: ClassVar[Kind] = Kind.SAMPLE_REQUEST
    credit: int = 1
    batch_size: int = 0  # off-policy: transitions per batch


@dataclass(kw_only=True)
class Batch(Message):
    """Shard -> learner: one served fragment (FIFO) or a sampled batch (off-policy)."""

    KIND: ClassVar[Kind] = Kind.BATCH
    version: int = 0
    inserted_t: float = 0.0
    sampler: str = ""
    arrays: Arrays = field(default_factory=dict)


@dataclass(kw_only=True)
class PriorityUpdate(Message):
    """Learner -> shard: new priorities for (index, generation) slots."""

    KIND: ClassVar[Kind] = Kind.PRIORITY_UPDATE
    arrays: Arrays = field(default_factory=dict)


@dataclass(kw_only=True)
class Params(Message):
    """Learner/peer PUB: policy params at `version`, with env steps and normaliser stats."""

    KIND: ClassVar[Kind] = Kind.PARAMS
    version: int = 0
    env_steps: int = 0
    final: bool = False
    arrays: Arrays = field(default_factory=dict)


@dataclass(kw_only=True)
class GossipHello(Message):
    """Peer <-> peer: what I hold (fingerprint, recent return, version) and who I know."""

    KIND: ClassVar[Kind] = Kind.GOSSIP_HELLO
    reply: bool = False
    fingerprint: str = ""
    reward: float = 0.0
    version: int = 0
    env_steps: int = 0
    members: list[Member] = field(default_factory=list)


@dataclass(kw_only=True)
class GossipParams(Message):
    """Peer <-> peer: a params request (`request`) or the params themselves."""

    KIND: ClassVar[Kind] = Kind.GOSSIP_PARAMS
    request: bool = False
    fingerprint: str = ""
    reward: float = 0.0
    version: int = 0
    compression: str = "none"
    arrays: Arrays = field(default_factory=dict)


@dataclass(kw_only=True)
class Metrics(Message):
    """Any role: a metrics sample (`role/name` keys)."""

    KIND: ClassVar[Kind] = Kind.METRICS
    values: dict[str, float] = field(default_factory=dict)


@dataclass(kw_only=True)
class Shutdown(Message):
    """Member -> registry -> everyone (PUB): stop the job cleanly, for `reason`."""

    KIND: ClassVar[Kind] = Kind.SHUTDOWN
    reason: str = ""


@dataclass(kw_only=True)
class Error(Message):
    """A reply saying the request could not be served, and why."""

    KIND: ClassVar[Kind] = Kind.ERROR
    error: str = ""
    arrays: Arrays = field(default_factory=dict)


KINDS: dict[int, type[Message]] = {
    cls.KIND: cls
    for cls in (Register, RegisterReply, Heartbeat, HeartbeatReply, Deregister,
                SnapshotRequest, MembershipSnapshot, MembershipDelta, Fragment,
                SampleRequest, Batch, PriorityUpdate, Params, GossipHello, GossipParams,
                Metrics, Shutdown, Error)
}
_BASE = ("src", "seq", "t")


# --------------------------------------------------------------------------- validators


def _bad(where: str, what: str) -> WireError:
    return WireError(f"{where}: {what}")


def _v_int(v, where):
    if type(v) is not int:
        raise _bad(where, f"expected int, got {type(v).__name__}")
    return v


def _v_float(v, where):
    if type(v) is float:
        return v
    if type(v) is int:
        return float(v)
    raise _bad(where, f"expected float, got {type(v).__name__}")


def _v_str(v, where):
    if type(v) is not str:
        raise _bad(where, f"expected str, got {type(v).__name__}")
    if len(v) > MAX_STR:
        raise _bad(where, "string too long")
    return v


def _v_bool(v, where):
    if type(v) is not bool:
        raise _bad(where, f"expected bool, got {type(v).__name__}")
    return v


_SCALARS = {int: _v_int, float: _v_float, str: _v_str, bool: _v_bool}


def _make_validator(tp) -> typing.Callable[[Any, str], Any]:
    if tp in _SCALARS:
        return _SCALARS[tp]
    origin = typing.get_origin(tp)
    if origin is dict:
        kv, vv = (_make_validator(a) for a in typing.get_args(tp))

        def v_dict(v, where):
            if type(v) is not dict or len(v) > MAX_ITEMS:
                raise _bad(where, "expected a map")
            return {kv(k, where): vv(x, f"{where}.{k}") for k, x in v.items()}

        return v_dict
    if origin is list:
        (iv,) = (_make_validator(a) for a in typing.get_args(tp))

        def v_list(v, where):
            if type(v) is not list or len(v) > MAX_ITEMS:
                raise _bad(where, "expected a list")
            return [iv(x, f"{where}[{i}]") for i, x in enumerate(v)]

        return v_list
    if dataclasses.is_dataclass(tp):
        schema = _schema(tp)

        def v_struct(v, where):
            if type(v) is not dict:
                raise _bad(where, f"expected a map for {tp.__name__}")
            return tp(**_check_fields(schema, v, where))

        return v_struct
    raise TypeError(f"no wire validator for {tp}")  # pragma: no cover - import-time


def _schema(cls) -> dict[str, typing.Callable]:
    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        if f.name in _BASE or f.name == "arrays":
            continue
        out[f.name] = _make_validator(hints[f.name])
    return out


def _check_fields(schema: dict, raw: dict, where: str) -> dict:
    out = {}
    for k, x in raw.items():
        check = schema.get(k) if type(k) is str else None
        if check is None:
            raise _bad(where, f"unknown field {str(k)[:40]!r}")
        out[k] = check(x, f"{where}.{k}")
    return out


_SCHEMAS = {k: _schema(cls) for k, cls in KINDS.items()}
_HAS_ARRAYS = {k: any(f.name == "arrays" for f in dataclasses.fields(c)) for k, c in KINDS.items()}


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
