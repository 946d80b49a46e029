"""`verl serve MODEL --http PORT`: an exported policy over HTTP (FastAPI on
uvicorn, the `serve` extra), with dynamic batching.

    POST /predict   {"obs": X} -> {"action": A}, or {"instances": [X, ...]} ->
                    {"actions": [A, ...]}; X is a nested list (or, for a Dict
                    policy, a map of its columns); a recurrent policy also takes
                    "state" ("states") and answers the next one. Bodies are JSON,
                    or msgpack (Content-Type application/msgpack), where arrays may
                    also be the ZeroMQ serve's {"dtype", "shape", "data"} maps.
    GET  /health    the model, its inputs, and whether it is ready
    GET  /metrics   Prometheus text: requests, errors by status, batch sizes,
                    latency, and the shadow's disagreements

Requests that arrive together are answered by one call of the model: the
batcher takes what is queued (up to `max_batch` rows; with `batch_wait_ms`,
waiting that long for more once one request is in) and runs the model in a
worker thread, so the server keeps reading requests meanwhile, and those that
came during one call make the next one's batch. With a shadow
model, every batch is also run by the shadow; its actions are never sent, and
where they differ from the main model's the `shadow_differs` event says so
(counted, with one example, at most once a second). Bad input gets a 4xx with
the reason, and nothing received is evaluated or unpickled.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
from fastapi import FastAPI, Request  # (the annotations below are read by FastAPI)
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from .serve import Runner, ServeError, pack_array, unpack_array
from .serve_batch import Batcher, HttpError, Stats

JSON, MSGPACK = "application/json", "application/msgpack"
# read as JSON: no type, and what `curl -d` sends unless told otherwise
JSON_TYPES = ("", JSON, "text/plain", "application/x-www-form-urlencoded")
DRAIN_BYTES = 64 << 20  # of a refused body read and dropped; past it the connection is cut


class HttpPolicy:
    """The model's inputs checked and built from a request, and the reply."""

    def __init__(self, runner: Runner, max_batch: int):
        self.runner, self.max_batch = runner, max_batch
        self.obs_names = runner.inputs[:-1] if runner.recurrent else list(runner.inputs)

    def parse(self, body: bytes, content_type: str) -> tuple[Any, str]:
        kind = content_type.split(";")[0].strip().lower()
        if kind in JSON_TYPES:
            try:
                return json.loads(body), JSON
            except (ValueError, UnicodeDecodeError) as e:
                raise HttpError(400, f"malformed JSON: {e}"[:200]) from None
        if kind in (MSGPACK, "application/x-msgpack"):
            try:
                return msgpack.unpackb(body, raw=False, strict_map_key=True), MSGPACK
            except Exception as e:  # msgpack raises many kinds on garbage
                raise HttpError(400, f"malformed msgpack: {type(e).__name__}") from None
        raise HttpError(415, f"Content-Type {kind!r}: send {JSON} or {MSGPACK}")

    def inputs(self, req: Any) -> tuple[list[np.ndarray], bool]:
        """(the model's inputs as a batch, whether the request was one observation)."""
        if not isinstance(req, dict):
            raise HttpError(400, 'a request is an object: {"obs": ...} or {"instances": [...]}')
        if ("obs" in req) == ("instances" in req):
            raise HttpError(400, 'give "obs" (one observation) or "instances" (a list), '
                                 'not both or neither')
        single = "obs" in req
        obs = [req["obs"]] if single else req["instances"]
        if not isinstance(obs, list) or not obs:
            raise HttpError(400, '"instances" is a non-empty list of observations')
        if len(obs) > self.max_batch:
            raise HttpError(413, f"{len(obs)} instances: at most {self.max_batch} a request")
        xs = [self._column(name, i, [self._field(o, name) for o in obs])
              for i, name in enumerate(self.obs_names)]
        if self.runner.recurrent:
            state = req.get("state") if single else req.get("states")
            n, size = len(obs), self.runner.state_size
            if state is None:  # every episode starts from zeros
                xs.append(np.zeros((n, size), np.float32))
            else:
                xs.append(self._column("state", len(self.obs_names),
                                       [state] if single else state, rows=n))
        return xs, single

    def _field(self, o: Any, name: str) -> Any:
        if len(self.obs_names) == 1 and not (isinstance(o, dict) and name in o
                                             and "data" not in o):
            return o
        if not isinstance(o, dict) or name not in o:
            raise HttpError(422, f"an observation is a map of {self.obs_names}; {name!r} "
                                 f"is missing")
        return o[name]

    def _column(self, name: str, i: int, values: list[Any], rows: int | None = None
                ) -> np.ndarray:
        dtype = self.runner.dtypes[i] or np.float32
        shape = self.runner.shapes[i]
        if rows is not None and (not isinstance(values, list) or len(values) != rows):
            raise HttpError(422, f"{name}: one per observation ({rows})")
        try:
            arr = np.stack([self._array(v, dtype) for v in values])
        except HttpError:
            raise
        except (ValueError, TypeError) as e:
            raise HttpError(422, f"{name}: not an array of numbers of one shape "
                                 f"({str(e)[:120]})") from None
        if shape is not None and (len(arr.shape) - 1 != len(shape) or any(
                d not in (-1, a) for d, a in zip(shape, arr.shape[1:]))):
            want = [("any" if d < 0 else d) for d in shape]
            raise HttpError(422, f"{name}: an observation of shape {list(arr.shape[1:])}; "
                                 f"this policy takes {want}")
        return arr

    @staticmethod
    def _array(v: Any, dtype: Any) -> np.ndarray:
        if isinstance(v, dict):  # the ZeroMQ serve's packed array (msgpack bodies)
            try:
                return unpack_array(v, min_dims=0).astype(dtype)
            except ServeError as e:
                raise HttpError(422, str(e)) from None
        if isinstance(v, str | bytes | bool) or v is None:
            raise HttpError(422, f"expected numbers, got {type(v).__name__}")
        arr = np.asarray(v)
        if arr.dtype.kind not in "biuf":
            raise HttpError(422, f"expected numbers, got {arr.dtype.kind!r} values")
        if arr.dtype.kind == "f" and not np.isfinite(arr).all():
            raise HttpError(422, "observations must be finite")
        return arr.astype(dtype)

    def reply(self, outs: list[np.ndarray], single: bool, kind: str) -> bytes:
        action, state = outs[0], (outs[1] if self.runner.recurrent and len(outs) > 1 else None)
        if kind == MSGPACK:
            body: dict[str, Any] = {"action" if single else "actions":
                                    pack_array(action[0] if single else action)}
            if state is not None:
                body["state" if single else "states"] = pack_array(
                    (state[0] if single else state).astype(np.float32))
            return msgpack.packb(body, use_bin_type=True)
        out: dict[str, Any] = {"action" if single else "actions":
                               (action[0] if single else action).tolist()}
        if state is not None:
            out["state" if single else "states"] = (state[0] if single else state).tolist()
        return json.dumps(out).encode()


async def _body(request: Request, most: int) -> bytes:
    """The request's body, refused (413) past `most` bytes."""
    body, chunks = bytearray(), request.stream()
    async for chunk in chunks:
        body += chunk
        if len(body) > most:
            await _drain(chunks, DRAIN_BYTES)
            raise HttpError(413, f"a body over {most} bytes")
    return bytes(body)


async def _drain(chunks: AsyncIterator[bytes], limit: int) -> None:
    """Read (and drop) the rest of a refused body, up to `limit` bytes, so the client
    reads the 413 instead of a reset connection."""
    seen = 0
    async for chunk in chunks:
        seen += len(chunk)
        if seen > limit:
            return


def make_app(model: str | Path, log: Any, shadow: str | Path | None = None,
             max_batch: int = 64, batch_wait_ms: float = 0.0,
             max_body_bytes: int = 8 << 20) -> Any:
    """The FastAPI app serving `model` (and comparing `shadow` with it)."""
    runner = Runner(model)
    shadow_runner = Runner(shadow) if shadow else None
    if shadow_runner is not None and shadow_runner.inputs != runner.inputs:
        raise ValueError(f"--shadow {shadow} takes {shadow_runner.inputs}, the model "
                         f"{runner.inputs}: a shadow answers the same requests")
    stats = Stats()
    policy = HttpPolicy(runner, max_batch)
    batcher = Batcher(runner, shadow_runner, max_batch, batch_wait_ms / 1000, stats, log)
    state: dict[str, Any] = {}

    async def lifespan(app: Any) -> Any:
        state["task"] = asyncio.create_task(batcher.run())
        log.info("serving_http", model=str(model), inputs=runner.inputs,
                 shadow=str(shadow or ""), max_batch=max_batch, batch_wait_ms=batch_wait_ms)
        yield
        state["task"].cancel()
        batcher.pool.shutdown(wait=False)

    app = FastAPI(title="verl serve", lifespan=lifespan)

    def refuse(e: HttpError) -> Response:
        stats.errors[e.status] = stats.errors.get(e.status, 0) + 1
        return JSONResponse({"error": str(e)}, status_code=e.status)

    @app.post("/predict")
    async def predict(request: Request) -> Response:
        t0 = time.perf_counter()
        stats.requests += 1
        try:
            body = await _body(request, max_body_bytes)
            req, kind = policy.parse(body, request.headers.get("content-type", ""))
            xs, single = policy.inputs(req)
            outs = await batcher.submit(xs)
            reply = policy.reply(outs, single, kind)
        except HttpError as e:
            return refuse(e)
        stats.latency.observe(time.perf_counter() - t0)
        return Response(reply, media_type=kind)

    @app.get("/health")
    async def health() -> Response:
        ok = "task" in state and not state["task"].done()
        return JSONResponse({"status": "ok" if ok else "stopped", "model": str(model),
                             "inputs": runner.inputs, "recurrent": runner.recurrent,
                             "shadow": str(shadow or "")}, status_code=200 if ok else 503)

    @app.get("/metrics")
    async def metrics() -> Response:
        return PlainTextResponse(stats.prometheus(), media_type="text/plain; version=0.0.4")

    app.state.stats = stats
    return app


def serve_http(model: str | Path, host: str, port: int, log: Any, **kw: Any) -> None:
    """Run the app on uvicorn until SIGINT or SIGTERM."""
    import uvicorn

    app = make_app(model, log, **kw)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False,
                            limit_concurrency=1024, timeout_keep_alive=30)
    uvicorn.Server(config).run()

