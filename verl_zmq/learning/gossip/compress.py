"""Compression of parameters sent between peers (`gossip.compression`).

- `none`: float32 as is.  `fp16`: half precision.
- `terngrad`: the change against a base both sides hold, as {-1, 0, +1} x a
  per-tensor scale s (the mean size of the changes of at least 0.7 of the
  mean), +-s for each change of at least s / 2 and 0 below; packed 4 to a byte
  (2 bits an element). Rounded deterministically, not stochastically as
  gradients are: error feedback (below) carries what a rounding missed into
  the next change, and only a rounding whose error is never above the change
  it rounds makes that carried error shrink rather than grow.
- `topk_delta`: only the k largest changes (by magnitude, per tensor) against
  the base, each a half-precision value and its index: the gap from the index
  before it in a byte where every gap fits, else 16 bits where the tensor allows
  (3 or 4 bytes a change kept, where float32 and int32 took 8).
For the two delta schemes the sender keeps, per receiver, what that receiver
can reconstruct, and sends the change against it: what was not sent (or was
rounded away) stays in the next change (error feedback). Both sides name the
base by its fingerprint; a receiver without it gets full parameters in half
precision, whose rounding the next changes correct.
"""

from __future__ import annotations

import numpy as np

from .grad_codec import pack2, unpack2

SCHEMES = ("none", "fp16", "terngrad", "topk_delta")
DELTA = ("terngrad", "topk_delta")


def encode(arrays: dict[str, np.ndarray], scheme: str, base: dict[str, np.ndarray] | None,
           topk_fraction: float = 0.05
           ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(what to send, what the receiver will reconstruct from it)."""
    if scheme == "none":
        full = {k: np.asarray(v, np.float32) for k, v in arrays.items()}
        return full, full
    if scheme == "fp16" or base is None:  # a delta scheme's first send: half precision,
        # its rounding corrected by the changes that follow (the receiver's base is this)
        half = {k: _half(v) for k, v in arrays.items()}
        return half, {k: v.astype(np.float32) for k, v in half.items()}
    assert base is not None  # a delta scheme, with a base (see the first branch)
    wire: dict[str, np.ndarray] = {}
    recon: dict[str, np.ndarray] = {}
    for k, v in arrays.items():
        delta = (np.asarray(v, np.float32) - base[k]).reshape(-1)
        if scheme == "terngrad":
            # deterministic: +-s where |delta| >= s / 2, s the mean size of the changes
            # at least 0.7 of the mean (ternary weights' threshold). No entry's error is
            # then above its change, so what error feedback carries into the next change
            # shrinks; a stochastic rounding's noise would be carried too, and grow
            a = np.abs(delta)
            big = a[a >= 0.7 * a.mean()] if delta.size else a
            s = float(big.mean()) if big.size else 0.0
            t = np.sign(delta) * (a >= s / 2) if s > 0 else np.zeros(delta.size)
            wire[f"{k}::tern"] = pack2((t + 1).astype(np.uint8))  # codes 0, 1, 2
            wire[f"{k}::scale"] = scale = np.array([s], np.float32)
            # as the receiver computes it, from the float32 scale: the same bits both sides
            got = float(scale[0]) * (t.astype(np.float32))
        elif scheme == "topk_delta":
            n = max(1, int(np.ceil(topk_fraction * delta.size)))
            idx = np.sort(np.argpartition(np.abs(delta), -n)[-n:])
            gaps = np.diff(idx, prepend=0)
            if gaps.max() < 256:  # dense enough: each index as its gap from the last
                wire[f"{k}::gap"] = gaps.astype(np.uint8)
            else:
                wire[f"{k}::idx"] = idx.astype(np.uint16 if delta.size <= 1 << 16
                                               else np.int32)
            val = delta[idx].astype(np.float16)
            if not np.isfinite(val).all():  # a change beyond half's range
                val = delta[idx]
            wire[f"{k}::val"] = val
            got = np.zeros(delta.size, np.float32)
            got[idx] = val  # what the receiver gets: the rest stays in the next change
        else:
            raise ValueError(f"gossip.compression: unknown {scheme!r}")
        recon[k] = base[k] + got.reshape(v.shape)
    return wire, recon


def _half(v: np.ndarray) -> np.ndarray:
    """`v` in half precision, or float32 where half cannot hold it (beyond 65504)."""
    with np.errstate(over="ignore"):  # an overflow is what the test below is for
        h = np.asarray(v, np.float16)
    return h if np.isfinite(h).all() or not np.isfinite(v).all() else np.asarray(v, np.float32)


def decode(wire: dict[str, np.ndarray], scheme: str, base: dict[str, np.ndarray] | None,
           reference: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Parameters from what arrived; ValueError when it does not fit `reference`
    (names, shapes) or the base it was made against is missing."""
    if scheme in ("none", "fp16") or (scheme in DELTA and not any("::" in k for k in wire)):
        return {k: np.asarray(v, np.float32) for k, v in wire.items()}
    if base is None:
        raise ValueError("a delta against a base this peer does not hold")
    out = {}
    for k, ref in reference.items():
        if scheme == "terngrad":
            t, s = wire.get(f"{k}::tern"), wire.get(f"{k}::scale")
            if t is None or s is None or t.shape != ((ref.size + 3) // 4,) \
                    or s.shape != (1,) or t.dtype != np.uint8 or not np.isfinite(s).all():
                raise ValueError(f"{k}: terngrad parts missing or misshapen")
            codes = unpack2(t, ref.size)
            if codes.max(initial=0) > 2:
                raise ValueError(f"{k}: terngrad values outside -1, 0, 1")
            out[k] = base[k] + float(s[0]) * (codes.astype(np.float32) - 1.0).reshape(ref.shape)
        elif scheme == "topk_delta":
            idx, val = wire.get(f"{k}::idx"), wire.get(f"{k}::val")
            if idx is None and (gap := wire.get(f"{k}::gap")) is not None:
                idx = np.cumsum(gap, dtype=np.int64) if gap.dtype == np.uint8 else gap
            if idx is None or val is None or idx.shape != val.shape or idx.ndim != 1:
                raise ValueError(f"{k}: top-k parts missing or misshapen")
            if idx.dtype.kind not in "iu" or (idx.size and (idx.min() < 0
                                                            or idx.max() >= ref.size)):
                raise ValueError(f"{k}: top-k indices out of range")
            flat = base[k].reshape(-1).copy()
            if val.dtype.kind != "f" or not np.isfinite(val).all():
                raise ValueError(f"{k}: top-k values not finite")
            flat[idx] += val.astype(np.float32)
            out[k] = flat.reshape(ref.shape)
        else:
            raise ValueError(f"unknown compression {scheme!r}")
    return out
