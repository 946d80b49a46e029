"""Compression of parameters sent between peers (`gossip.compression`).

- `none`: float32 as is.  `fp16`: half precision.
- `terngrad`: the change against a base both sides hold, quantised to
  {-1, 0, +1} x a per-tensor scale s = max|delta|, each element +-1 with
  probability |delta| / s: unbiased, E[decoded] = the exact change.
- `topk_delta`: only the k largest changes (by magnitude, per tensor) against
  the base.
For the two delta schemes the sender keeps, per receiver, what that receiver
can reconstruct, and sends the change against it: what was not sent (or was
rounded away) stays in the next change (error feedback). Both sides name the
base by its fingerprint; a receiver without it gets full parameters.
"""

from __future__ import annotations

import numpy as np

SCHEMES = ("none", "fp16", "terngrad", "topk_delta")
DELTA = ("terngrad", "topk_delta")


def encode(arrays: dict[str, np.ndarray], scheme: str, base: dict[str, np.ndarray] | None,
           rng: np.random.Generator, topk_fraction: float = 0.05
           ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(what to send, what the receiver will reconstruct from it)."""
    if scheme == "none" or (scheme in DELTA and base is None):
        full = {k: np.asarray(v, np.float32) for k, v in arrays.items()}
        return full, full
    if scheme == "fp16":
        half = {k: np.asarray(v, np.float16) for k, v in arrays.items()}
        return half, {k: v.astype(np.float32) for k, v in half.items()}
    assert base is not None  # a delta scheme, with a base (see the first branch)
    wire: dict[str, np.ndarray] = {}
    recon: dict[str, np.ndarray] = {}
    for k, v in arrays.items():
        delta = (np.asarray(v, np.float32) - base[k]).reshape(-1)
        if scheme == "terngrad":
            s = float(np.abs(delta).max(initial=0.0))
            t = (np.sign(delta) * (rng.random(delta.size) < np.abs(delta) / s)
                 if s > 0 else np.zeros(delta.size))
            wire[f"{k}::tern"] = t.astype(np.int8).reshape(v.shape)
            wire[f"{k}::scale"] = np.array([s], np.float32)
            got = (s * t).astype(np.float32)
        elif scheme == "topk_delta":
            n = max(1, int(np.ceil(topk_fraction * delta.size)))
            idx = np.argpartition(np.abs(delta), -n)[-n:].astype(np.int32)
            wire[f"{k}::idx"] = idx
            wire[f"{k}::val"] = delta[idx].astype(np.float32)
            got = np.zeros(delta.size, np.float32)
            got[idx] = delta[idx]
        else:
            raise ValueError(f"gossip.compression: unknown {scheme!r}")
        recon[k] = base[k] + got.reshape(v.shape)
    return wire, recon


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
            if t is None or s is None or t.shape != ref.shape or s.shape != (1,):
                raise ValueError(f"{k}: terngrad parts missing or misshapen")
            if t.dtype.kind not in "iu" or np.abs(t).max(initial=0) > 1:
                raise ValueError(f"{k}: terngrad values outside -1, 0, 1")
            out[k] = base[k] + float(s[0]) * t.astype(np.float32)
        elif scheme == "topk_delta":
            idx, val = wire.get(f"{k}::idx"), wire.get(f"{k}::val")
            if idx is None or val is None or idx.shape != val.shape or idx.ndim != 1:
                raise ValueError(f"{k}: top-k parts missing or misshapen")
            if idx.dtype.kind not in "iu" or (idx.size and (idx.min() < 0
                                                            or idx.max() >= ref.size)):
                raise ValueError(f"{k}: top-k indices out of range")
            flat = base[k].reshape(-1).copy()
            flat[idx] += val.astype(np.float32)
            out[k] = flat.reshape(ref.shape)
        else:
            raise ValueError(f"unknown compression {scheme!r}")
    return out
