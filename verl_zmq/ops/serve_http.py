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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
from fastapi import FastAPI, Request  # (the annotations below are read by FastAPI)
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from .serve import Runner, ServeError, pack_array, unpack_array

JSON, MSGPACK = "application/json", "application/msgpack"
# read as JSON: no type, and what `curl -d` sends unless told otherwise
JSON_TYPES = ("", JSON, "text/plain", "application/x-www-form-urlencoded")
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
DRAIN_BYTES = 64 << 20  # of a refused body read and dropped; past it the connection is cut
LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0)


class HttpError(Exception):
    """A request refused with an HTTP status and a reason."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass
class Histogram:
    """A Prometheus histogram: cumulative bucket counts, sum and count."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    n: int = 0

    def observe(self, v: float) -> None:
        if not self.counts:
            self.counts = [0] * len(self.bounds)
        for i, b in enumerate(self.bounds):
            if v <= b:
                self.counts[i] += 1
        self.total += v
        self.n += 1

    def lines(self, name: str) -> list[str]:
        counts = self.counts or [0] * len(self.bounds)
        out = [f'{name}_bucket{{le="{b:g}"}} {c}' for b, c in zip(self.bounds, counts)]
        return [*out, f'{name}_bucket{{le="+Inf"}} {self.n}', f"{name}_sum {self.total:g}",
                f"{name}_count {self.n}"]


@dataclass
class Stats:
    """What /metrics reports."""

    requests: int = 0
    errors: dict[int, int] = field(default_factory=dict)
    batches: Histogram = field(default_factory=lambda: Histogram(BATCH_BUCKETS))
    latency: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS))
    shadow_rows: int = 0
    shadow_differs: int = 0

    def prometheus(self) -> str:
        out = ["# TYPE verl_serve_requests_total counter",
               f"verl_serve_requests_total {self.requests}",
               "# TYPE verl_serve_errors_total counter"]
        out += [f'verl_serve_errors_total{{status="{s}"}} {n}'
                for s, n in sorted(self.errors.items())]
        out += ["# TYPE verl_serve_batch_rows histogram",
                *self.batches.lines("verl_serve_batch_rows"),
                "# TYPE verl_serve_latency_seconds histogram",
                *self.latency.lines("verl_serve_latency_seconds"),
                "# TYPE verl_serve_shadow_rows_total counter",
                f"verl_serve_shadow_rows_total {self.shadow_rows}",
                "# TYPE verl_serve_shadow_differs_total counter",
                f"verl_serve_shadow_differs_total {self.shadow_differs}"]
        return "\n".join(out) + "\n"


def _signature(xs: list[np.ndarray]) -> tuple[Any, ...]:
    return tuple((x.dtype.str, x.shape[1:]) for x in xs)


class Batcher:
    """Queues requests' inputs and answers them from one model call per batch."""

    def __init__(self, runner: Runner, shadow: Runner | None, max_batch: int,
                 wait_s: float, stats: Stats, log: Any):
        self.runner, self.shadow, self.max_batch, self.wait_s = runner, shadow, max_batch, wait_s
        self.stats, self.log = stats, log
        self.queue: asyncio.Queue[tuple[list[np.ndarray], asyncio.Future[Any]]] = \
            asyncio.Queue()
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="serve-model")
        self.said_at = 0.0

    async def submit(self, xs: list[np.ndarray]) -> list[np.ndarray]:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        await self.queue.put((xs, fut))
        result: list[np.ndarray] = await fut
        return result

    async def run(self) -> None:
        while True:
            first = await self.queue.get()
            items = [first]
            rows = len(first[0][0])
            deadline = time.monotonic() + self.wait_s
            yielded = False
            while rows < self.max_batch:
                try:
                    if not self.queue.empty():
                        nxt = self.queue.get_nowait()
                    elif not yielded:
                        # once, let the loop parse what has already arrived: requests
                        # that came together are answered together, at no wait
                        yielded = True
                        await asyncio.sleep(0)
                        continue
                    else:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            break
                        nxt = await asyncio.wait_for(self.queue.get(), left)
                except (TimeoutError, asyncio.QueueEmpty):
                    break
                items.append(nxt)
                rows += len(nxt[0][0])
            groups: dict[tuple[Any, ...], list[Any]] = {}
            for it in items:  # requests of one shape and dtype go through together
                groups.setdefault(_signature(it[0]), []).append(it)
            for group in groups.values():
                await self._answer(group)

    async def _answer(self, group: list[tuple[list[np.ndarray], asyncio.Future[Any]]]) -> None:
        xs = [np.concatenate([g[0][i] for g in group]) for i in range(len(group[0][0]))]
        loop = asyncio.get_running_loop()
        try:
            outs = await loop.run_in_executor(self.pool, self._call, xs)
        except Exception as e:  # the model refused these inputs: every caller is told
            for _, fut in group:
                if not fut.done():
                    fut.set_exception(HttpError(422, f"the policy failed on this input: "
                                                     f"{type(e).__name__}: {str(e)[:200]}"))
            return
        self.stats.batches.observe(len(xs[0]))
        start = 0
        for ins, fut in group:
            n = len(ins[0])
            if not fut.done():
                fut.set_result([np.asarray(o)[start:start + n] for o in outs])
            start += n

    def _call(self, xs: list[np.ndarray]) -> list[np.ndarray]:
        outs = [np.asarray(o) for o in self.runner(xs)]
        if self.shadow is not None:
            self._compare(xs, outs[0], np.asarray(self.shadow(xs)[0]))
        return outs

    def _compare(self, xs: list[np.ndarray], main: np.ndarray, shadow: np.ndarray) -> None:
        """Count the rows where the shadow would have acted otherwise; say so, with
        one example, at most once a second."""
        n = len(main)
        a, b = main.reshape(n, -1).astype(np.float64), shadow.reshape(n, -1).astype(np.float64)
        differs = ~np.isclose(a, b, rtol=1e-5, atol=1e-6).all(axis=1) if a.shape == b.shape \
            else np.ones(n, bool)
        self.stats.shadow_rows += n
        k = int(differs.sum())
        self.stats.shadow_differs += k
        now = time.monotonic()
        if k and now - self.said_at >= 1.0:
            self.said_at = now
            i = int(np.argmax(differs))
            self.log.info("shadow_differs", rows=n, differ=k,
                          total_differs=self.stats.shadow_differs,
                          obs=[x[i].tolist() for x in xs[:1]][0],
                          action=main[i].tolist(), shadow_action=shadow[i].tolist())


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
            body, chunks = bytearray(), request.stream()
            async for chunk in chunks:
                body += chunk
                if len(body) > max_body_bytes:
                    await _drain(chunks, DRAIN_BYTES)
                    raise HttpError(413, f"a body over {max_body_bytes} bytes")
            req, kind = policy.parse(bytes(body), request.headers.get("content-type", ""))
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

