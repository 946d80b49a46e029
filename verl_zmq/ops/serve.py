"""Serving an exported policy over ZeroMQ REQ/REP, and a small client.

A request is one msgpack map `{"obs": ARRAY}`, a reply `{"action": ARRAY}` or
`{"error": "why"}`, where ARRAY is `{"dtype": "float32", "shape": [B, ...],
"data": <raw little-endian bytes>}`. Nothing received is unpickled or
evaluated; a malformed request gets an error reply and the server keeps
serving. The server logs request latency percentiles every `report_s` seconds.

    verl serve policy.onnx --bind tcp://127.0.0.1:5600
    >>> PolicyClient("tcp://127.0.0.1:5600").act(obs)
"""

from __future__ import annotations

import time
from pathlib import Path

import msgpack
import numpy as np
import zmq

DTYPES = {"float32", "float64", "int64", "int32", "uint8"}
MAX_REQUEST_BYTES = 64 << 20


class ServeError(ValueError):
    """A request that cannot be answered (the reason goes back to the client)."""


def pack_array(a: np.ndarray) -> dict:
    a = np.ascontiguousarray(a)
    return {"dtype": a.dtype.name, "shape": list(a.shape), "data": a.tobytes()}


def unpack_array(d: object) -> np.ndarray:
    if not isinstance(d, dict) or not {"dtype", "shape", "data"} <= d.keys():
        raise ServeError("an array is a map with dtype, shape and data")
    dtype, shape, data = d["dtype"], d["shape"], d["data"]
    if dtype not in DTYPES:
        raise ServeError(f"dtype {dtype!r} not one of {sorted(DTYPES)}")
    if (not isinstance(shape, list) or not 1 <= len(shape) <= 8
            or not all(isinstance(n, int) and 0 <= n < 1 << 31 for n in shape)):
        raise ServeError("shape must be a list of 1 to 8 non-negative ints")
    if not isinstance(data, bytes) or len(data) != int(np.prod(shape)) * np.dtype(dtype).itemsize:
        raise ServeError(f"data is not {shape} x {dtype}")
    return np.frombuffer(data, dtype).reshape(shape)


def load_runner(path: str | Path):
    """A function obs [B, ...] float32 -> actions, for a .onnx or TorchScript file."""
    path = str(path)
    if path.endswith(".onnx"):
        import onnxruntime as ort

        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        name = sess.get_inputs()[0].name
        return lambda obs: sess.run(None, {name: obs})[0]
    import torch

    module = torch.jit.load(path, map_location="cpu")

    def run(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return module(torch.from_numpy(obs)).numpy()
    return run


class PolicyServer:
    """Answers observation requests with the exported policy's actions on a REP socket."""

    def __init__(self, model: str | Path, bind: str, log, obs_shape: tuple[int, ...] | None = None,
                 report_s: float = 10.0):
        self.run = load_runner(model)
        self.log = log
        self.report_s = report_s
        self.obs_shape = obs_shape
        self.ctx = zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.REP)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.MAXMSGSIZE, MAX_REQUEST_BYTES)
        self.sock.bind(bind)
        self.endpoint = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.latencies: list[float] = []
        self.requests = self.errors = 0
        self.stopped = False

    def handle(self, frames: list[bytes]) -> dict:
        try:
            if len(frames) != 1:
                raise ServeError("one frame per request")
            try:
                req = msgpack.unpackb(frames[0], raw=False, max_bin_len=MAX_REQUEST_BYTES)
            except Exception as e:  # msgpack raises many kinds on garbage
                raise ServeError(f"not msgpack: {type(e).__name__}") from None
            if not isinstance(req, dict) or "obs" not in req:
                raise ServeError("a request is a map with an 'obs' array")
            obs = unpack_array(req["obs"]).astype(np.float32)
            if self.obs_shape is not None and tuple(obs.shape[1:]) != self.obs_shape:
                raise ServeError(f"obs shape {list(obs.shape)}, expected [B, "
                                 f"{', '.join(map(str, self.obs_shape))}]")
            return {"action": pack_array(np.asarray(self.run(obs)))}
        except ServeError as e:
            self.errors += 1
            return {"error": str(e)}
        except Exception as e:  # the model refused the input: the client is told why
            self.errors += 1
            return {"error": f"policy failed: {type(e).__name__}: {str(e)[:200]}"}

    def serve_forever(self) -> None:
        self.log.info("serving", endpoint=self.endpoint)
        last = time.monotonic()
        while not self.stopped:
            if self.sock.poll(200):
                frames = self.sock.recv_multipart()
                t0 = time.perf_counter()
                reply = self.handle(frames)
                self.sock.send(msgpack.packb(reply, use_bin_type=True))
                self.latencies.append(time.perf_counter() - t0)
                self.requests += 1
            if time.monotonic() - last >= self.report_s:
                self.report()
                last = time.monotonic()
        self.report()
        self.sock.close(0)

    def report(self) -> None:
        if not self.latencies:
            return
        ms = np.array(self.latencies) * 1e3
        self.log.info("serve_latency", requests=self.requests, errors=self.errors,
                      window=len(ms), p50_ms=round(float(np.percentile(ms, 50)), 4),
                      p90_ms=round(float(np.percentile(ms, 90)), 4),
                      p99_ms=round(float(np.percentile(ms, 99)), 4),
                      max_ms=round(float(ms.max()), 4))
        self.latencies.clear()


class PolicyClient:
    """Sends observations to a `verl serve` endpoint and returns its actions."""

    def __init__(self, endpoint: str, timeout_s: float = 10.0):
        self.sock = zmq.Context.instance().socket(zmq.REQ)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.RCVTIMEO, int(timeout_s * 1000))
        self.sock.connect(endpoint)

    def request(self, payload: bytes) -> dict:
        self.sock.send(payload)
        return msgpack.unpackb(self.sock.recv(), raw=False)

    def act(self, obs: np.ndarray) -> np.ndarray:
        """Actions for a batch of observations [B, ...]; raises ServeError on an error reply."""
        reply = self.request(msgpack.packb({"obs": pack_array(np.asarray(obs, np.float32))},
                                           use_bin_type=True))
        if "error" in reply:
            raise ServeError(reply["error"])
        return unpack_array(reply["action"])

    def close(self) -> None:
        self.sock.close(0)
