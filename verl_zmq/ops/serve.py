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
    a = np.asarray(a, order="C")  # (ascontiguousarray would make a scalar 1-d)
    return {"dtype": a.dtype.name, "shape": list(a.shape), "data": a.tobytes()}


def unpack_array(d: object, min_dims: int = 1) -> np.ndarray:
    """An array from its map; `min_dims` 0 takes a scalar (one HTTP observation)."""
    if not isinstance(d, dict) or not {"dtype", "shape", "data"} <= d.keys():
        raise ServeError("an array is a map with dtype, shape and data")
    dtype, shape, data = d["dtype"], d["shape"], d["data"]
    if dtype not in DTYPES:
        raise ServeError(f"dtype {dtype!r} not one of {sorted(DTYPES)}")
    if (not isinstance(shape, list) or not min_dims <= len(shape) <= 8
            or not all(isinstance(n, int) and 0 <= n < 1 << 31 for n in shape)):
        raise ServeError(f"shape must be a list of {min_dims} to 8 non-negative ints")
    if not isinstance(data, bytes) or len(data) != int(np.prod(shape)) * np.dtype(dtype).itemsize:
        raise ServeError(f"data is not {shape} x {dtype}")
    return np.frombuffer(data, dtype).reshape(shape)


class Runner:
    """An exported policy (.onnx or TorchScript): its input names (the observation's
    columns, then `state` for a recurrent policy), each input's dtype and shape past
    the batch where the model says (-1: any size), and a call from those inputs to
    its outputs (actions, then the next state)."""

    shapes: list[tuple[int, ...] | None]

    def __init__(self, path: str | Path):
        path = str(path)
        if path.endswith(".onnx"):
            import onnxruntime as ort

            sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            self.inputs = [i.name for i in sess.get_inputs()]
            self.dtypes = [_ONNX_DTYPES.get(i.type, np.float32) for i in sess.get_inputs()]
            self.shapes = [tuple(d if isinstance(d, int) else -1 for d in i.shape[1:])
                           for i in sess.get_inputs()]
            last = sess.get_inputs()[-1].shape
            self.state_size = int(last[1]) if self.recurrent else 0
            self._run = lambda xs: sess.run(None, dict(zip(self.inputs, xs)))
            return
        import json

        import torch

        extra = {"verl.json": ""}
        module = torch.jit.load(path, map_location="cpu", _extra_files=extra)
        meta = json.loads(extra["verl.json"] or "{}")  # inputs and state size, from export
        self.inputs = list(meta.get("inputs", ["obs"]))
        self.state_size = int(meta.get("state_size", 0))
        self.dtypes = [np.dtype(d).type for d in meta["dtypes"]] if "dtypes" in meta \
            else [None] * len(self.inputs)
        # shapes past the batch (None: unknown, a model exported before they were kept)
        self.shapes = [tuple(x) for x in meta["shapes"]] if "shapes" in meta \
            else [None] * len(self.inputs)

        def run(xs: list[np.ndarray]) -> list[np.ndarray]:
            with torch.no_grad():
                out = module(*[torch.from_numpy(np.ascontiguousarray(x)) for x in xs])
            return [o.numpy() for o in out] if isinstance(out, tuple) else [out.numpy()]
        self._run = run

    @property
    def recurrent(self) -> bool:
        return bool(self.inputs) and self.inputs[-1] == "state"

    def __call__(self, xs: list[np.ndarray]) -> list[np.ndarray]:
        return list(self._run([x if dt is None else x.astype(dt, copy=False)
                               for x, dt in zip(xs, self.dtypes)]))


_ONNX_DTYPES = {"tensor(float)": np.float32, "tensor(double)": np.float64,
                "tensor(int64)": np.int64, "tensor(int8)": np.int8, "tensor(uint8)": np.uint8}


class PolicyServer:
    """Answers observation requests with the exported policy's actions on a REP socket."""

    def __init__(self, model: str | Path, bind: str, log, obs_shape: tuple[int, ...] | None = None,
                 report_s: float = 10.0):
        self.run = Runner(model)
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
            xs = self._inputs(req)
            out = self.run(xs)
            reply = {"action": pack_array(np.asarray(out[0]))}
            if self.run.recurrent:
                reply["state"] = pack_array(np.asarray(out[1], np.float32))
            return reply
        except ServeError as e:
            self.errors += 1
            return {"error": str(e)}
        except Exception as e:  # the model refused the input: the client is told why
            self.errors += 1
            return {"error": f"policy failed: {type(e).__name__}: {str(e)[:200]}"}

    def _inputs(self, req: dict) -> list[np.ndarray]:
        """The model's inputs from a request: `obs` an array (a plain observation) or a
        map {column: array}; `state` for a recurrent policy (zeros when absent: every
        episode starts)."""
        names = self.run.inputs[:-1] if self.run.recurrent else self.run.inputs
        if isinstance(req["obs"], dict) and "data" not in req["obs"]:
            missing = [n for n in names if n not in req["obs"]]
            if missing:
                raise ServeError(f"obs lacks {missing[:3]} (this policy takes {names})")
            xs = [unpack_array(req["obs"][n]) for n in names]
        else:
            if len(names) != 1:
                raise ServeError(f"obs must be a map of {names}")
            xs = [unpack_array(req["obs"]).astype(np.float32)]
            if self.obs_shape is not None and tuple(xs[0].shape[1:]) != self.obs_shape:
                raise ServeError(f"obs shape {list(xs[0].shape)}, expected [B, "
                                 f"{', '.join(map(str, self.obs_shape))}]")
        if self.run.recurrent:
            B = len(xs[0])
            state = req.get("state")
            xs.append(unpack_array(state).astype(np.float32) if state is not None
                      else np.zeros((B, self.run.state_size), np.float32))
        return xs

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
    """Sends observations to a `verl serve` endpoint and returns its actions. A
    request without a reply in `timeout_s` (the server stopped, hung or gone)
    raises TimeoutError; the client is usable again at once."""

    def __init__(self, endpoint: str, timeout_s: float = 10.0):
        self.endpoint, self.timeout_s = endpoint, timeout_s
        self.sock = self._connect()

    def _connect(self) -> zmq.Socket:
        sock = zmq.Context.instance().socket(zmq.REQ)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVTIMEO, int(self.timeout_s * 1000))
        sock.setsockopt(zmq.SNDTIMEO, int(self.timeout_s * 1000))
        sock.connect(self.endpoint)
        return sock

    def request(self, payload: bytes) -> dict:
        try:
            self.sock.send(payload)
            return msgpack.unpackb(self.sock.recv(), raw=False)
        except zmq.Again:
            # a REQ socket that sent and got no reply can send nothing more: a new one
            self.sock.close(0)
            self.sock = self._connect()
            raise TimeoutError(f"no reply from {self.endpoint} in {self.timeout_s:g} s "
                               f"(the server is stopped, hung or gone)") from None

    def act(self, obs, state: np.ndarray | None = None):
        """Actions for a batch of observations [B, ...] (a structured one: {column:
        array}); with a recurrent policy's `state`, (actions, next state). Raises
        ServeError on an error reply."""
        o = ({k: pack_array(np.asarray(v)) for k, v in obs.items()} if isinstance(obs, dict)
             else pack_array(np.asarray(obs, np.float32)))
        req = {"obs": o}
        if state is not None:
            req["state"] = pack_array(np.asarray(state, np.float32))
        reply = self.request(msgpack.packb(req, use_bin_type=True))
        if "error" in reply:
            raise ServeError(reply["error"])
        action = unpack_array(reply["action"])
        return (action, unpack_array(reply["state"])) if state is not None else action

    def close(self) -> None:
        self.sock.close(0)
