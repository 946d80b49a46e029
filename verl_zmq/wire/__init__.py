"""The wire: every message kind as a typed dataclass, and the codec.

A message is one ZeroMQ multipart message. Frame 0 is a msgpack map, the
header:

    {"v": PROTOCOL_VERSION, "k": kind, "src": member id, "seq": n, "t": send time,
     "f": {the kind's fields},
     "a": [[name, dtype.str, shape, data], ...]}

where `data` is the array's bytes (msgpack bin, arrays up to INLINE_MAX bytes)
or the index of the frame that holds them (larger arrays, sent zero-copy).
Fragments and batches pack their small arrays instead: `"p": [layout, frame]`,
a msgpack layout `[[name, dtype.str, shape], ...]` (validated once, then looked
up) and one frame holding the arrays' bytes, each at a multiple of ALIGN.

`encode(msg) -> frames` and `decode(frames) -> msg` are the only way in and out.
`decode` checks everything it is handed and raises `WireError`, and nothing
else, for anything malformed: nothing a peer sends is unpickled, evaluated or
decoded through msgpack ext hooks.

Split by concern: `messages` (the kinds and limits), `schema` (field
validators), `codec` (encode and decode), `arena` (columns written in place in
the buffer a packed message sends).
"""

from .arena import Arena as Arena
from .codec import allow_params_of as allow_params_of
from .codec import decode as decode
from .codec import encode as encode
from .messages import *  # noqa: F403 - the kinds, limits and errors are the wire's API
