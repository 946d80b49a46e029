"""Compression of the gradients peers push (`gossip.compression`), one flat
float32 vector at a time:

- `none`: float32 as is (4 bytes an element).  `fp16`: half precision (2).
- `terngrad`: {-1, 0, +1} x s, s = max|g|, each element +-1 with probability
  |g| / s (unbiased: E[decoded] = g), packed 4 to a byte (2 bits an element).
- `sign`: 1-bit sign SGD with error feedback: the signs of g + e packed 8 to a
  byte, times the mean magnitude; e, what the signs did not carry, is added to
  the sender's next gradient (Karimireddy et al. 2019).
- `topk_delta`: the largest `topk_fraction` of g + e by magnitude (indices and
  values), the rest kept in e for the next push.

`encode` keeps the sender's error-feedback residual; `decode` checks what came
(sizes, codes, finite values) and raises ValueError for what does not fit."""

from __future__ import annotations

import numpy as np

SCHEMES = ("none", "fp16", "terngrad", "sign", "topk_delta")


class GradEncoder:
    """One peer's encoder of its pushes: its scheme, and the error it feeds back."""

    def __init__(self, scheme: str, rng: np.random.Generator, topk_fraction: float = 0.05):
        if scheme not in SCHEMES:
            raise ValueError(f"gossip.compression: unknown {scheme!r}")
        self.scheme, self.rng, self.topk_fraction = scheme, rng, topk_fraction
        self.residual: np.ndarray | None = None

    def encode(self, g: np.ndarray) -> dict[str, np.ndarray]:
        g = np.asarray(g, np.float32).reshape(-1)
        s = self.scheme
        if s == "none":
            return {"grad": g}
        if s == "fp16":
            return {"grad16": g.astype(np.float16)}
        if s == "terngrad":
            scale = float(np.abs(g).max(initial=0.0))
            t = np.sign(g) * (self.rng.random(g.size) < np.abs(g) / scale) if scale > 0 \
                else np.zeros(g.size)
            codes = (t + 1).astype(np.uint8)  # 0, 1, 2
            return {"tern": pack2(codes), "scale": np.array([scale], np.float32),
                    "size": np.array([g.size], np.int64)}
        if self.residual is None or self.residual.size != g.size:
            self.residual = np.zeros(g.size, np.float32)
        x = g + self.residual
        if s == "sign":
            scale = float(np.abs(x).mean()) if x.size else 0.0
            bits = x >= 0
            sent = np.where(bits, scale, -scale).astype(np.float32)
            self.residual = x - sent
            return {"sign": np.packbits(bits), "scale": np.array([scale], np.float32),
                    "size": np.array([g.size], np.int64)}
        n = max(1, int(np.ceil(self.topk_fraction * x.size)))
        idx = np.argpartition(np.abs(x), -n)[-n:].astype(np.int32)
        val = x[idx].astype(np.float32)
        self.residual = x.copy()
        self.residual[idx] = 0.0
        return {"idx": idx, "val": val, "size": np.array([g.size], np.int64)}


def pack2(codes: np.ndarray) -> np.ndarray:
    """Values 0-3, four to a byte."""
    pad = (-codes.size) % 4
    c = np.concatenate([codes, np.zeros(pad, np.uint8)]).reshape(-1, 4)
    out: np.ndarray = (c[:, 0] | (c[:, 1] << 2) | (c[:, 2] << 4) | (c[:, 3] << 6)).astype(
        np.uint8)
    return out


def unpack2(packed: np.ndarray, size: int) -> np.ndarray:
    p = np.asarray(packed, np.uint8)
    out = np.stack([p & 3, (p >> 2) & 3, (p >> 4) & 3, (p >> 6) & 3], axis=1).reshape(-1)
    return out[:size]


def decode(arrays: dict[str, np.ndarray], size: int) -> np.ndarray:
    """The gradient a push carries, of `size` elements; ValueError when it does not
    decode to one (a scheme's parts missing, the wrong size, codes out of range)."""
    if "grad" in arrays or "grad16" in arrays:
        g = np.asarray(arrays.get("grad", arrays.get("grad16")), np.float32).reshape(-1)
    else:
        n = arrays.get("size")
        if n is None or n.shape != (1,) or int(n[0]) != size:
            raise ValueError(f"a push of another size than this peer's gradient ({size})")
        if "tern" in arrays and "scale" in arrays:
            codes = unpack2(arrays["tern"], size)
            if codes.size != size or codes.max(initial=0) > 2:
                raise ValueError("terngrad codes outside -1, 0, 1 or too few")
            g = (codes.astype(np.float32) - 1.0) * float(arrays["scale"][0])
        elif "sign" in arrays and "scale" in arrays:
            bits = np.unpackbits(np.asarray(arrays["sign"], np.uint8))[:size]
            if bits.size != size:
                raise ValueError("too few sign bits")
            g = np.where(bits == 1, 1.0, -1.0).astype(np.float32) * float(arrays["scale"][0])
        elif "idx" in arrays and "val" in arrays:
            idx, val = arrays["idx"], arrays["val"]
            if idx.shape != val.shape or idx.ndim != 1 or idx.dtype.kind not in "iu" or \
                    (idx.size and (idx.min() < 0 or idx.max() >= size)):
                raise ValueError("top-k indices out of range or misshapen")
            g = np.zeros(size, np.float32)
            g[idx] = val
        else:
            raise ValueError("no gradient in the push (grad, grad16, tern, sign or idx)")
    if g.size != size:
        raise ValueError(f"a gradient of {g.size} elements, this peer's has {size}")
    if not np.isfinite(g).all():
        raise ValueError("gradient is not finite")
    return g


def nbytes(arrays: dict[str, np.ndarray]) -> int:
    """Bytes of a push's arrays (what the compression saved is measured by)."""
    return int(sum(np.asarray(v).nbytes for v in arrays.values()))
