#!/usr/bin/env python
"""`verl serve --http` under load, beside the ZeroMQ serve, in one invocation.

A CartPole PPO policy (configs/cartpole_ppo.toml's network, its initial weights:
the time to answer does not depend on them) is exported to ONNX and served:

1. over HTTP, loaded by wrk (Debian's `wrk`; `--connections` connections,
   `--seconds` seconds, one JSON observation a request): requests/s, p50 and p99
   latency as wrk measures them, and the batch sizes the server formed (from
   /metrics);
2. the same policy over ZeroMQ (`verl serve`), loaded by as many client threads
   as connections, one observation a request, for as long: requests/s, p50, p99;
3. 200 malformed HTTP requests, 25 of each of 8 kinds: the status each got, and
   whether the server still answers a good request after them.

    python tools/bench/serve_http.py [--connections 4] [--seconds 30]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: tools.*
from tools.harness import ROOT, free_ports, http_ok, poll  # noqa: E402

VERL = str(Path(sys.executable).with_name("verl"))
OBS = [0.02, -0.01, 0.03, 0.04]
LUA = """wrk.method = "POST"
wrk.body = '{"obs": [0.02, -0.01, 0.03, 0.04]}'
wrk.headers["Content-Type"] = "application/json"
"""


def policy(tmp: Path) -> Path:
    from verl_zmq.algos import make_algorithm
    from verl_zmq.checkpoint import policy_state, save_atomic
    from verl_zmq.config import dumps_job, load_job
    from verl_zmq.envs.make import env_spec
    from verl_zmq.ops.export import export

    job = load_job(ROOT / "configs" / "cartpole_ppo.toml")
    algo = make_algorithm(job, env_spec(job.environment))
    ckpt = tmp / "policy.pt"
    save_atomic(policy_state(dumps_job(job), "ppo", algo.policy_arrays(), None, env_steps=0),
                ckpt)
    return export(ckpt, "onnx", tmp / "policy.onnx")


def _ms(text: str) -> float:
    v, unit = re.match(r"([\d.]+)(us|ms|s)", text).groups()  # type: ignore[union-attr]
    return float(v) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]


def http(model: Path, a: argparse.Namespace, tmp: Path) -> None:
    port = free_ports()[0]
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([VERL, "serve", str(model), "--http", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if not poll(lambda: http_ok(f"{url}/health"), 60):
            sys.exit("verl serve --http did not answer /health within 60 s")
        (tmp / "post.lua").write_text(LUA)
        out = subprocess.run(["wrk", "-t", "2", "-c", str(a.connections), "-d", f"{a.seconds}s",
                              "--latency", "-s", str(tmp / "post.lua"), f"{url}/predict"],
                             capture_output=True, text=True, timeout=a.seconds + 60).stdout
        rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore
        p50 = _ms(re.search(r"50%\s+(\S+)", out).group(1))  # type: ignore[union-attr]
        p99 = _ms(re.search(r"99%\s+(\S+)", out).group(1))  # type: ignore[union-attr]
        non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
        with urllib.request.urlopen(f"{url}/metrics", timeout=5) as r:
            m = r.read().decode()
        c = {ln.split()[0]: float(ln.split()[1]) for ln in m.splitlines()
             if ln and not ln.startswith("#")}
        buckets = {k: v for k, v in c.items() if k.startswith("verl_serve_batch_rows_bucket")}
        print(f"== HTTP (wrk, {a.connections} connections, {a.seconds} s, one JSON observation "
              f"a request)")
        print(f"requests/s {rps:,.0f}; latency p50 {p50:.3f} ms, p99 {p99:.3f} ms; "
              f"non-2xx {non2xx.group(1) if non2xx else 0}")
        n = c["verl_serve_batch_rows_count"]
        cumulative = ", ".join(f"<={re.sub(r'[^0-9.Inf+]', '', k.split('=')[1])} {v:,.0f}"
                               for k, v in buckets.items())
        print(f"batches {n:,.0f} for {c['verl_serve_batch_rows_sum']:,.0f} rows: mean "
              f"{c['verl_serve_batch_rows_sum'] / max(n, 1):.2f} rows a batch; cumulative "
              f"{cumulative}")
        malformed(url)
    finally:
        proc.terminate()
        proc.wait(20)


def malformed(url: str) -> None:
    bad = {
        "malformed JSON": (b'{"obs": [1, 2', "application/json"),
        "not an object": (b"[1, 2]", "application/json"),
        "neither obs nor instances": (b'{"x": 1}', "application/json"),
        "a wrong shape": (b'{"obs": [0.1, 0.2]}', "application/json"),
        "a wrong dtype": (b'{"obs": ["a", 0, 0, 0]}', "application/json"),
        "not finite": (b'{"obs": [0, 0, 0, NaN]}', "application/json"),
        "an oversized body": (b" " * (9 << 20), "application/json"),
        "an unknown content type": (b"1,2,3,4", "text/csv"),
    }
    print("\n== 200 malformed requests (25 of each kind)")
    print("| kind | statuses |\n|---|---|")
    for kind, (body, ctype) in bad.items():
        got: dict[int, int] = {}
        for _ in range(25):
            req = urllib.request.Request(f"{url}/predict", body, {"Content-Type": ctype})
            try:
                with urllib.request.urlopen(req, timeout=10) as r:
                    status = r.status
            except urllib.error.HTTPError as e:
                status = e.code
            except urllib.error.URLError:  # the connection cut, no status read
                status = 0
            got[status] = got.get(status, 0) + 1
        said = ", ".join(f"{s or 'cut'} x{n}" for s, n in sorted(got.items()))
        print(f"| {kind} | {said} |")
    req = urllib.request.Request(f"{url}/predict", json.dumps({"obs": OBS}).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        print(f"a good request after them: {r.status} {r.read().decode()}")


def zmq_serve(model: Path, a: argparse.Namespace) -> None:
    from verl_zmq.ops.serve import PolicyClient

    port = free_ports()[0]
    ep = f"tcp://127.0.0.1:{port}"
    proc = subprocess.Popen([VERL, "serve", str(model), "--bind", ep],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        PolicyClient(ep, timeout_s=30).act(np.asarray([OBS], np.float32))  # up
        lat: list[list[float]] = [[] for _ in range(a.connections)]
        stop = time.monotonic() + a.seconds

        def client(i: int) -> None:
            c = PolicyClient(ep)
            obs = np.asarray([OBS], np.float32)
            while time.monotonic() < stop:
                t0 = time.perf_counter()
                c.act(obs)
                lat[i].append(time.perf_counter() - t0)

        ts = [threading.Thread(target=client, args=(i,)) for i in range(a.connections)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        ms = np.concatenate([np.asarray(x) for x in lat]) * 1e3
        print(f"\n== ZeroMQ serve ({a.connections} client threads, {a.seconds} s, one "
              f"observation a request, msgpack)")
        print(f"requests/s {len(ms) / a.seconds:,.0f}; latency p50 "
              f"{np.percentile(ms, 50):.3f} ms, p99 {np.percentile(ms, 99):.3f} ms")
    finally:
        proc.terminate()
        proc.wait(20)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--seconds", type=int, default=30)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        model = policy(tmp)
        http(model, a, tmp)
        zmq_serve(model, a)


if __name__ == "__main__":
    main()
