"""The HTTP serve's batching and metrics: requests queued by the app are answered
by one call of the model per batch (in a worker thread, so requests go on being
read), a shadow model compared on every batch, and the counts /metrics reports
in Prometheus's text format."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .serve import Runner

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
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
