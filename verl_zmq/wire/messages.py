"""Every message kind as a typed dataclass, the limits a frame must keep, and
the lazy array mapping decoded messages carry."""

from __future__ import annotations

import enum
from collections.abc import ItemsView, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

PROTOCOL_VERSION = 1
INLINE_MAX = 64 * 1024  # arrays above this travel as their own frame
ALIGN = 8  # packed arrays start at multiples of this many bytes
MAX_MESSAGE_BYTES = 256 * 1024 * 1024
MAX_HEADER_BYTES = 32 * 1024 * 1024
MAX_ARRAYS = 512
MAX_NDIM = 8
MAX_STR = 4096
MAX_ITEMS = 65_536
ALLOWED_DTYPES = frozenset(
    ["|b1", "|u1", "|i1", "<u2", "<i2", "<u4", "<i4", "<u8", "<i8", "<f2", "<f4", "<f8"]
)

# name -> array: a dict when made here, LazyArrays when decoded
Arrays = Mapping[str, np.ndarray]
_DTYPES = {s: np.dtype(s) for s in ALLOWED_DTYPES}


class LazyArrays(Mapping[str, np.ndarray]):
    """Decoded arrays, checked at decode but built on first access (np.frombuffer,
    no copy). A shard that only forwards a fragment never builds them at all.
    Arrays described one by one are in `specs` (name -> dtype, shape, buffer);
    packed ones are `index` entries (name -> dtype, shape, offset, size) into
    `packed` = (layout, buffer), forwarded as they came."""

    __slots__ = ("_specs", "_built", "packed", "_index")

    def __init__(self, specs: dict[str, tuple[Any, ...]],
                 packed: tuple[bytes, Any] | None = None,
                 index: dict[str, tuple[np.dtype[Any], tuple[int, ...], int, int]] | None = None):
        self._specs = specs
        self._built: dict[str, np.ndarray] = {}
        self.packed = packed
        self._index: dict[str, tuple[np.dtype[Any], tuple[int, ...], int, int]] = index or {}

    def _spec(self, name: str) -> tuple[Any, ...]:
        e = self._index.get(name)
        if e is None or self.packed is None:
            return self._specs[name]
        dtype, shape, off, n = e
        return dtype, shape, self.packed[1][off:off + n]

    def __getitem__(self, name: str) -> np.ndarray:
        arr = self._built.get(name)
        if arr is None:
            dtype, shape, buf = self._spec(name)
            arr = (np.empty(shape, dtype) if not len(buf)
                   else np.frombuffer(buf, dtype=dtype).reshape(shape))
            self._built[name] = arr
        return arr

    def __iter__(self) -> Iterator[str]:
        yield from self._index
        yield from self._specs

    def __len__(self) -> int:
        return len(self._index) + len(self._specs)

    def __contains__(self, name: object) -> bool:
        return name in self._index or name in self._specs

    def unpacked(self) -> ItemsView[str, tuple[Any, ...]]:
        """(name, (dtype, shape, buffer)) of the arrays that did not arrive packed
        (those travel as they came): for re-encoding, nothing built."""
        return self._specs.items()

    def __repr__(self) -> str:
        return f"LazyArrays({ {k: (self._spec(k)[0].str, self._spec(k)[1]) for k in self} })"


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
    # 16 (metrics) and 18 (error) were never sent: retired, never to be reused
    SHUTDOWN = 17
    GOSSIP_GRADS = 19
    GOSSIP_BATCH = 20
    TOOL_CALL = 21
    TOOL_ANSWER = 22
    SCORE_REQUEST = 23
    SCORE_REPLY = 24


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
    # the highest params version the member's group has reported (samplers, the
    # evaluator, trainers): a trainer that takes over numbers its params above it
    version_seen: int = 0


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
    version_seen: int = 0  # as RegisterReply's, now


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
    """Sampler -> shard: T steps x E envs of experience, columnar, plus episode
    stats. Its columns are declared once, in `batch.Layout.fields` (the wire
    checks only dtypes, shapes and sizes; the shard checks the columns)."""

    KIND: ClassVar[Kind] = Kind.FRAGMENT
    version: int = 0
    arrays: Arrays = field(default_factory=dict)
    # a multi-agent job: the policy whose agents took these steps (its shard checks
    # it is its own); "" in a single-agent job
    policy: str = ""


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
    sampler_seq: int = 0  # a served fragment's `seq` from its sampler (FIFO): its order
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
    updates: int = 0  # updates made: what samplers pace on (a peer's mix also moves version)
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
    """Peer <-> peer: a params request (`request`), the params themselves, or a
    round's push (`round`)."""

    KIND: ClassVar[Kind] = Kind.GOSSIP_PARAMS
    request: bool = False
    round: int = 0  # > 0: a push of exact mixing's round `round` (no reply)
    fingerprint: str = ""
    reward: float = 0.0
    version: int = 0
    compression: str = "none"
    arrays: Arrays = field(default_factory=dict)


@dataclass(kw_only=True)
class GossipGrads(Message):
    """Peer -> peer, no reply: one round of gradient averaging (`gossip.mixing =
    "gradients"`): the flat gradient of one minibatch (`arrays["grad"]`; empty for
    the round that opens an update) and scalars averaged alike."""

    KIND: ClassVar[Kind] = Kind.GOSSIP_GRADS
    round: int = 0
    scalars: dict[str, float] = field(default_factory=dict)
    arrays: Arrays = field(default_factory=dict)


@dataclass(kw_only=True)
class GossipBatch(Message):
    """Peer -> peer, no reply (`gossip.share = "experience"`): the batch a peer just
    trained on, its columns as the update reads them ([T, E, ...] stepwise), or
    encoded per `gossip.compression` (`batch_codec.py`), for a neighbour to train on
    beside its own."""

    KIND: ClassVar[Kind] = Kind.GOSSIP_BATCH
    update: int = 0
    reward: float = 0.0
    arrays: Arrays = field(default_factory=dict)


@dataclass(kw_only=True)
class ToolCall(Message):
    """Sampler or evaluator -> tool server: one operation of the tool at `tool` (its
    path in `environment.kwargs.tools`): "start" a trajectory's state, or "call" it
    with `arguments` and the trajectory's `state` (JSON text, as it travels to the
    sandbox). `id` pairs the answer with its call."""

    KIND: ClassVar[Kind] = Kind.TOOL_CALL
    id: int = 0
    tool: str = ""
    op: str = "call"
    arguments: str = "{}"
    state: str = "null"


@dataclass(kw_only=True)
class ToolAnswer(Message):
    """Tool server -> its caller: the answer's text and the state after the call (JSON
    text), or `error` (which the model reads as the tool's answer)."""

    KIND: ClassVar[Kind] = Kind.TOOL_ANSWER
    id: int = 0
    text: str = ""
    state: str = "null"
    error: str = ""


@dataclass(kw_only=True)
class ScoreRequest(Message):
    """Sampler -> reward-model server: responses to score, `arrays["items"]` the UTF-8
    JSON of [[chat turns, response], ...] (`seq/reward_model.encode_items`)."""

    KIND: ClassVar[Kind] = Kind.SCORE_REQUEST
    id: int = 0
    arrays: Arrays = field(default_factory=dict)


@dataclass(kw_only=True)
class ScoreReply(Message):
    """Reward-model server -> its caller: `arrays["score"]`, one float32 a response,
    or `error`."""

    KIND: ClassVar[Kind] = Kind.SCORE_REPLY
    id: int = 0
    error: str = ""
    arrays: Arrays = field(default_factory=dict)


@dataclass(kw_only=True)
class Shutdown(Message):
    """Member -> registry -> everyone (PUB): stop the job cleanly, for `reason`."""

    KIND: ClassVar[Kind] = Kind.SHUTDOWN
    reason: str = ""


KINDS: dict[int, type[Message]] = {
    cls.KIND: cls
    for cls in (Register, RegisterReply, Heartbeat, HeartbeatReply, Deregister,
                SnapshotRequest, MembershipSnapshot, MembershipDelta, Fragment,
                SampleRequest, Batch, PriorityUpdate, Params, GossipHello, GossipParams,
                GossipGrads, GossipBatch, ToolCall, ToolAnswer, ScoreRequest, ScoreReply,
                Shutdown)
}
