"""How a pushed batch (`gossip.share = "experience"`) travels under
`gossip.compression`, column by column:

- `none`: every column as the update reads it.
- any other scheme: booleans packed 8 to a byte and integers in the smallest
  signed type that holds their range (both lossless); float columns in half
  precision (`fp16`) or, for the schemes that quantise (`terngrad`,
  `topk_delta`), as 8-bit codes over each element position's range across the
  batch's steps (per observation feature, say), rounded stochastically so that
  a decoded value is unbiased (E[decoded] = the value), as TernGrad rounds. A
  column whose range is zero (CartPole's reward) decodes exactly. A [T, E, ...]
  column's codes travel as each step's change from the step before (mod 256),
  which deflates: an observation moves little from one step to the next.
  Every byte payload is deflated when that saves bytes.

The receiver decodes against its own batch's columns: the same names, dtypes
and shapes apart from the env axis, or ValueError. Nothing that arrives is
trusted for a size: a deflated payload is inflated to at most the bytes its
checked shape holds.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping

import numpy as np

QUANTISE = ("terngrad", "topk_delta")
Own = Mapping[str, tuple[np.dtype, tuple[int, ...]]]
_CODES = {"bits": np.uint8, "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64,
          "f16": np.float16, "q8": np.uint8, "q8d": np.uint8}


def encode(arrays: Mapping[str, np.ndarray], scheme: str, rng: np.random.Generator,
           lead: Callable[[str], int]) -> dict[str, np.ndarray]:
    """What travels for `arrays`; `lead(column)`: its leading step axes (2 for a
    [T, E, ...] column, 1 for [E, ...]), over which a quantised column's ranges run."""
    if scheme == "none":
        return dict(arrays)
    out: dict[str, np.ndarray] = {}
    for k, a in arrays.items():
        a = np.asarray(a)
        out[f"{k}::shape"] = np.array(a.shape, np.int32)
        payload: np.ndarray
        if a.dtype == np.bool_:
            code, payload = "bits", np.packbits(a.reshape(-1))
        elif a.dtype.kind in "iu":
            code = _int_code(a)
            payload = a.astype(_CODES[code])
        elif a.dtype.kind == "f" and scheme in QUANTISE and a.size:
            payload, out[f"{k}::range"] = _quantise(a, lead(k), rng)
            code = "q8"
            if lead(k) == 2:  # a step's codes as the change from the step before (mod
                # 256): an observation or value moves little per step, so they deflate
                code, payload[1:] = "q8d", payload[1:] - payload[:-1]
        elif a.dtype.kind == "f" and np.isfinite(h := a.astype(np.float16)).all() \
                and np.isfinite(a).all():
            code, payload = "f16", h
        else:
            out[k] = a  # as it is (a float outside half's range, say)
            continue
        raw = np.ascontiguousarray(payload).reshape(-1).view(np.uint8)
        packed = zlib.compress(raw.tobytes(), 1)
        if len(packed) < raw.nbytes:
            out[f"{k}::{code}z"] = np.frombuffer(packed, np.uint8)
        else:
            out[f"{k}::{code}"] = np.ascontiguousarray(payload).reshape(-1)
    return out


def _int_code(a: np.ndarray) -> str:
    lo, hi = (int(a.min()), int(a.max())) if a.size else (0, 0)
    for code, t in (("i8", np.int8), ("i16", np.int16), ("i32", np.int32)):
        if np.iinfo(t).min <= lo and hi <= np.iinfo(t).max:
            return code
    return "i64"


def _quantise(a: np.ndarray, lead: int, rng: np.random.Generator
              ) -> tuple[np.ndarray, np.ndarray]:
    """`a`'s 8-bit codes (its shape) and their range: each element position's
    (lowest, step) across the `lead` step axes."""
    x = a.astype(np.float64).reshape(-1, *a.shape[lead:])
    lo, hi = x.min(axis=0), x.max(axis=0)
    step = (hi - lo) / 255.0
    safe = np.where(step > 0, step, 1.0)
    # stochastic rounding: floor(u + r), u uniform, so E[code] = r exactly
    codes = np.floor((x - lo) / safe + rng.random(x.shape))
    codes = np.clip(np.where(step > 0, codes, 0), 0, 255).astype(np.uint8)
    return codes.reshape(a.shape), np.stack([lo, step]).astype(np.float32)


def decode(wire: Mapping[str, np.ndarray], own: Own, lead: Callable[[str], int]
           ) -> dict[str, np.ndarray]:
    """The batch a push carries, in `own`'s dtypes; ValueError when it does not fit
    (`lead(column)` as for `encode`: its last step axis, the env axis, is the one
    whose size may differ from ours)."""
    if not any("::" in k for k in wire):
        return {k: np.asarray(v) for k, v in wire.items()}
    names = {k.split("::", 1)[0] for k in wire}
    if names != set(own):
        raise ValueError(f"columns {sorted(names)} are not {sorted(own)}")
    out = {}
    for k, (dt, shape) in own.items():
        if k in wire:
            out[k] = np.asarray(wire[k])
            continue
        s = wire.get(f"{k}::shape")
        if s is None or s.ndim != 1 or s.dtype.kind not in "iu" or len(s) != len(shape):
            raise ValueError(f"{k}: no shape, or not {len(shape)} axes")
        got = tuple(int(n) for n in s)
        axis = lead(k) - 1
        if any(n < 0 for n in got) or any(x != y for i, (x, y) in enumerate(zip(got, shape))
                                          if i != axis):
            raise ValueError(f"{k} has shape {got}, ours {shape}")
        if np.prod(got) > 16 * max(1, int(np.prod(shape))):  # a deflated payload's bound
            raise ValueError(f"{k} has shape {got}, over 16 times ours {shape}")
        out[k] = _column(wire, k, got, dt, lead(k))
    return out


def _column(wire: Mapping[str, np.ndarray], k: str, shape: tuple[int, ...], dt: np.dtype,
            lead: int) -> np.ndarray:
    n = int(np.prod(shape))
    for code, t in _CODES.items():
        for z in ("", "z"):
            p = wire.get(f"{k}::{code}{z}")
            if p is None:
                continue
            count = (n + 7) // 8 if code == "bits" else n
            want = count * np.dtype(t).itemsize
            raw = _inflate(p, want, k) if z else np.asarray(p)
            if raw.nbytes != want:
                raise ValueError(f"{k}: {raw.nbytes} bytes, its shape {shape} holds {want}")
            v = np.frombuffer(np.ascontiguousarray(raw).tobytes(), t)
            if code == "bits":
                return np.unpackbits(v)[:n].astype(bool).reshape(shape).astype(dt)
            if code == "q8d":
                v = np.cumsum(v.reshape(shape), axis=0, dtype=np.uint8)
            if code in ("q8", "q8d"):
                return _dequantise(wire, k, v, shape, dt, lead)
            return v.reshape(shape).astype(dt)
    raise ValueError(f"{k}: no payload")


def _inflate(p: np.ndarray, want: int, k: str) -> np.ndarray:
    d = zlib.decompressobj()
    try:
        raw = d.decompress(np.asarray(p, np.uint8).tobytes(), want + 1)
    except zlib.error as e:
        raise ValueError(f"{k}: {e}") from None
    if len(raw) != want or d.unconsumed_tail:
        raise ValueError(f"{k}: inflates to more or fewer than the {want} bytes it holds")
    return np.frombuffer(raw, np.uint8)


def _dequantise(wire: Mapping[str, np.ndarray], k: str, codes: np.ndarray,
                shape: tuple[int, ...], dt: np.dtype, lead: int) -> np.ndarray:
    r = wire.get(f"{k}::range")
    n = int(np.prod(shape))
    if r is None or r.shape != (2, *shape[lead:]) or r.dtype.kind != "f" or n == 0 \
            or not np.isfinite(r).all():
        raise ValueError(f"{k}: quantised without a range that fits its shape")
    x = codes.reshape(-1, *shape[lead:]).astype(np.float64) * r[1] + r[0]
    out: np.ndarray = x.reshape(shape).astype(dt)
    return out
