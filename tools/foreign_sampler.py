#!/usr/bin/env python
"""A CartPole-style PPO sampler written from the README's wire specification
alone: it imports pyzmq, msgpack, numpy and gymnasium (and the standard
library), never verl_zmq. It joins a running job through the registry,
receives params, and ships fragments that the job's learner accepts.

    python tools/foreign_sampler.py --job RUN/job.toml --registry tcp://127.0.0.1:PORT \\
        [--id sampler-foreign] [--group main] [--seconds 0]

Discrete actions and an MLP policy (`algorithm.policy`), as PPO publishes it:
`pi.<i>.weight/bias` and `v.<i>.weight/bias` layers, the job's activation between
them. Logs one JSON line per event on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import tomllib

import gymnasium as gym
import msgpack
import numpy as np
import zmq

WIRE = 1
KIND = {"Register": 1, "RegisterReply": 2, "Heartbeat": 3, "HeartbeatReply": 4,
        "Deregister": 5, "SnapshotRequest": 6, "MembershipSnapshot": 7, "Fragment": 9,
        "Params": 13}
NAME = {v: k for k, v in KIND.items()}
INLINE_MAX = 64 * 1024


def log(event: str, **kw) -> None:
    print(json.dumps({"ts": time.time(), "event": event, **kw}), flush=True)


# -- the wire ---------------------------------------------------------------------------

class Wire:
    """Header map + raw array frames, as the README's wire section specifies."""

    def __init__(self, src: str):
        self.src, self.seq = src, 0

    def encode(self, kind: str, fields: dict, arrays: dict | None = None) -> list[bytes]:
        self.seq += 1
        frames: list[bytes] = [b""]
        specs = []
        for name, arr in (arrays or {}).items():
            arr = np.ascontiguousarray(arr)
            data = arr.tobytes()
            if len(data) <= INLINE_MAX:
                specs.append([name, arr.dtype.str, list(arr.shape), data])
            else:
                specs.append([name, arr.dtype.str, list(arr.shape), len(frames)])
                frames.append(data)
        frames[0] = msgpack.packb({"v": WIRE, "k": KIND[kind], "src": self.src,
                                   "seq": self.seq, "t": time.time(), "f": fields,
                                   "a": specs}, use_bin_type=True)
        return frames

    @staticmethod
    def decode(frames: list[bytes]) -> tuple[str, dict, dict[str, np.ndarray]]:
        h = msgpack.unpackb(frames[0], raw=False)
        arrays = {}
        for name, dt, shape, data in h.get("a", []):
            buf = data if isinstance(data, bytes) else frames[data]
            arrays[name] = np.frombuffer(buf, np.dtype(dt)).reshape(shape)
        return NAME.get(h["k"], str(h["k"])), h.get("f", {}), arrays


# -- the policy (numpy) -------------------------------------------------------------------

class Policy:
    """PPO's actor-critic MLPs from published params, evaluated with numpy."""

    def __init__(self, activation: str):
        self.act_fn = np.tanh if activation == "tanh" else (lambda x: np.maximum(x, 0.0))
        self.layers: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
        self.rms: tuple[np.ndarray, np.ndarray] | None = None
        self.version = -1

    def load(self, version: int, arrays: dict[str, np.ndarray]) -> None:
        for head in ("pi", "v"):
            idx = sorted({int(k.split(".")[1]) for k in arrays if k.startswith(head + ".")})
            self.layers[head] = [(arrays[f"{head}.{i}.weight"].astype(np.float64),
                                  arrays[f"{head}.{i}.bias"].astype(np.float64)) for i in idx]
        if "obs_rms/mean" in arrays:
            self.rms = (arrays["obs_rms/mean"], arrays["obs_rms/var"])
        self.version = version

    def _mlp(self, head: str, x: np.ndarray) -> np.ndarray:
        layers = self.layers[head]
        for i, (w, b) in enumerate(layers):
            x = x @ w.T + b
            if i < len(layers) - 1:
                x = self.act_fn(x)
        return x

    def act(self, obs: np.ndarray, rng: np.random.Generator):
        logits = self._mlp("pi", obs.reshape(len(obs), -1))
        logp_all = logits - logits.max(-1, keepdims=True)
        logp_all -= np.log(np.exp(logp_all).sum(-1, keepdims=True))
        p = np.exp(logp_all)
        a = (p.cumsum(-1) > rng.random((len(obs), 1))).argmax(-1)
        logp = logp_all[np.arange(len(obs)), a]
        value = self._mlp("v", obs.reshape(len(obs), -1))[:, 0]
        return a.astype(np.int64), logp.astype(np.float32), value.astype(np.float32)


# -- the sampler ---------------------------------------------------------------------------

class ForeignSampler:
    """Registers, heartbeats, follows membership, acts, ships fragments."""

    def __init__(self, job: dict, registry: str, member_id: str, group: str,
                 keys: dict | None = None):
        self.job, self.id, self.group = job, member_id, group
        self.keys = keys  # the job's CURVE key pair (z85), when its sockets use CURVE
        launch = job.get("launch", {})
        self.hb = float(launch.get("heartbeat_interval_s", 1.0))
        self.liveness = int(launch.get("heartbeat_liveness", 3))
        self.wire = Wire(member_id)
        self.ctx = zmq.Context()
        self.registry = registry
        self.reg = None
        self.push = self.ctx.socket(zmq.PUSH)
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        for s in (self.push, self.sub):
            self._secure(s)
        self.push.setsockopt(zmq.SNDHWM, 2)
        self.connected: dict[str, str] = {}
        self.incarnation = time.time_ns() // 1000
        self.members_seq = -1
        self.stop = ""
        self.policy = Policy(job.get("algorithm", {}).get("policy", {}).get("activation",
                                                                             "tanh"))
        self.sent = 0

    def _secure(self, sock) -> None:
        """No linger; with the job's keys, a CURVE client of the job's servers (every
        socket of a job holds the one key pair)."""
        sock.setsockopt(zmq.LINGER, 0)
        if self.keys:
            pub, sec = self.keys["public"].encode(), self.keys["secret"].encode()
            sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = pub, pub, sec

    def member(self) -> dict:
        index = int(self.id.rsplit("-", 1)[-1]) if self.id.rsplit("-", 1)[-1].isdigit() else 0
        return {"id": self.id, "role": "sampler", "group": self.group,
                "incarnation": self.incarnation, "host": "127.0.0.1", "index": index,
                "endpoints": {}, "versions": {"wire": str(WIRE), "gymnasium": gym.__version__}}

    def _ask(self, kind: str, fields: dict, want: str, timeout_s: float):
        self.reg.send_multipart(self.wire.encode(kind, fields))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.reg.poll(int(max(1, (deadline - time.monotonic()) * 1000))):
                got, f, _ = Wire.decode(self.reg.recv_multipart())
                if got == want:
                    return f
        return None

    def register(self) -> None:
        if self.reg is not None:
            self.reg.close(0)
        self.reg = self.ctx.socket(zmq.DEALER)
        self._secure(self.reg)
        self.reg.connect(self.registry)
        while True:
            f = self._ask("Register", {"member": self.member()}, "RegisterReply", 5.0)
            if f is not None:
                break
            log("registry_unreachable")
        if not f["ok"]:
            log("registration_refused", error=f["error"])
            raise SystemExit(2)
        log("registered", members=len(f["members"]))
        self._apply(f["members"], f["members_seq"])

    def _apply(self, members: list[dict], seq: int) -> None:
        self.members_seq = seq
        want = {}
        for m in members:
            if m["group"] != self.group:
                continue
            if m["role"] == "replay" and m["endpoints"].get("fragments"):
                want["push:" + m["id"]] = m["endpoints"]["fragments"]
            if m["role"] == "learner" and m["endpoints"].get("params"):
                want["sub:" + m["id"]] = m["endpoints"]["params"]
        for key, ep in list(self.connected.items()):
            if want.get(key) != ep:
                (self.push if key.startswith("push:") else self.sub).disconnect(ep)
                del self.connected[key]
        for key, ep in want.items():
            if key not in self.connected:
                (self.push if key.startswith("push:") else self.sub).connect(ep)
                self.connected[key] = ep
                log("connected", to=key, endpoint=ep)

    def heartbeat(self) -> None:
        f = self._ask("Heartbeat", {"incarnation": self.incarnation, "status": {}},
                      "HeartbeatReply", self.hb * self.liveness)
        if f is None:  # a silent registry: a new socket, register again
            log("registry_silent")
            self.register()
            return
        if f.get("shutdown"):
            self.stop = f["shutdown"]
        elif not f["known"]:
            self.register()
        elif f["members_seq"] != self.members_seq:
            snap = self._ask("SnapshotRequest", {}, "MembershipSnapshot", 5.0)
            if snap is not None:
                self._apply(snap["members"], snap["members_seq"])

    def take_params(self) -> None:
        while self.sub.poll(0):
            kind, f, arrays = Wire.decode(self.sub.recv_multipart())
            if kind == "Params" and f["version"] >= self.policy.version:
                self.policy.load(f["version"], arrays)


def collect(s: ForeignSampler, venv, state: dict, T: int, rng) -> tuple[dict, int]:
    """T steps of E envs in the fragment layout the README gives (NEXT_STEP autoreset:
    the step after a finished episode is only the reset, so it is not `valid`)."""
    E = venv.num_envs
    env = s.job.get("environment", {})
    clip = float(env.get("clip_obs", 10.0))
    cols = {k: np.zeros((T, E), np.float32) for k in ("reward", "logp", "value")}
    obs = np.zeros((T, E, *venv.single_observation_space.shape), np.float32)
    raw_all = np.zeros_like(obs)
    action = np.zeros((T, E), np.int64)
    flags = {k: np.zeros((T, E), bool) for k in ("terminated", "truncated", "valid")}
    done_ret, done_len = [], []
    version = s.policy.version

    def norm(x):
        if s.policy.rms is None:
            return x.astype(np.float32)
        mean, var = s.policy.rms
        return np.clip((x - mean) / np.sqrt(var + 1e-8), -clip, clip).astype(np.float32)

    for t in range(T):
        o = norm(state["obs"])
        obs[t], raw_all[t] = o, state["obs"]
        a, logp, v = s.policy.act(o, rng)
        action[t], cols["logp"][t], cols["value"][t] = a, logp, v
        nxt, r, te, tr, _ = venv.step(a)
        ok = ~state["prev_done"]
        flags["valid"][t] = ok
        flags["terminated"][t], flags["truncated"][t] = te & ok, tr & ok
        cols["reward"][t] = np.where(ok, r, 0.0)
        state["ret"] += np.where(ok, r, 0.0)
        state["len"] += ok
        for i in np.flatnonzero((te | tr) & ok):
            done_ret.append(state["ret"][i])
            done_len.append(state["len"][i])
            state["ret"][i], state["len"][i] = 0.0, 0
        state["prev_done"] = te | tr
        state["obs"] = nxt
    boot = norm(state["obs"])
    _, blogp, bvalue = s.policy.act(boot, rng)
    arrays = {"obs": obs, "action": action, **flags, **cols, "bootstrap_obs": boot,
              "bootstrap_logp": blogp, "bootstrap_value": bvalue,
              "ep_return": np.array(done_ret, np.float64),
              "ep_length": np.array(done_len, np.int64)}
    if s.policy.rms is not None:  # raw-observation moments, for the learner's statistics
        flat = raw_all.reshape(T * E, -1).astype(np.float64)
        arrays.update(rms_mean=flat.mean(0).reshape(obs.shape[2:]),
                      rms_var=flat.var(0).reshape(obs.shape[2:]),
                      rms_count=np.array([float(T * E)]))
    return arrays, version


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--job", required=True, help="the job's resolved job.toml")
    ap.add_argument("--registry", required=True)
    ap.add_argument("--id", default="sampler-foreign")
    ap.add_argument("--group", default="main")
    ap.add_argument("--seconds", type=float, default=0.0, help="0: until the job ends")
    ap.add_argument("--keys", default="", help="the run folder's keys.json (CURVE jobs)")
    args = ap.parse_args()
    with open(args.job, "rb") as f:
        job = tomllib.load(f)
    keys = None
    if args.keys:
        with open(args.keys) as f:
            keys = json.load(f)
    s = ForeignSampler(job, args.registry, args.id, args.group, keys)
    signal.signal(signal.SIGTERM, lambda *_: setattr(s, "stop", "sigterm"))
    sampling, env = job.get("sampling", {}), job.get("environment", {})
    T, E = int(sampling.get("fragment_length", 32)), int(sampling.get("num_envs_per_worker", 2))
    seed = int(job.get("experiment", {}).get("seed", 0)) * 10_007 + os.getpid() % 1000
    venv = gym.make_vec(env["id"], num_envs=E, vectorization_mode="sync")
    raw, _ = venv.reset(seed=seed)
    state = {"obs": raw, "prev_done": np.zeros(E, bool), "ret": np.zeros(E),
             "len": np.zeros(E, np.int64)}
    rng = np.random.default_rng(seed)
    s.register()
    t_end = time.monotonic() + args.seconds if args.seconds > 0 else float("inf")
    next_hb = time.monotonic()
    # bounded staleness, as the README's samplers do: after `max_fragments_ahead`
    # fragments on one param version, wait (up to 2 x liveness) for a newer one;
    # otherwise fragments queue up in sockets and arrive too old to learn from
    ahead = int(sampling.get("max_fragments_ahead", 2))
    if sampling.get("mode", "async") == "sync":
        ahead = 1
    shipped, shipped_version, waited_since = 0, None, None
    while not s.stop and time.monotonic() < t_end:
        if time.monotonic() >= next_hb:
            s.heartbeat()
            next_hb = time.monotonic() + s.hb
        s.take_params()
        if s.policy.version < 0 or not any(k.startswith("push:") for k in s.connected):
            time.sleep(0.05)  # no params or no shard yet
            continue
        if s.policy.version != shipped_version:
            shipped, shipped_version, waited_since = 0, s.policy.version, None
        if ahead and shipped >= ahead:
            waited_since = waited_since or time.monotonic()
            if time.monotonic() - waited_since < 2 * s.hb * s.liveness:
                s.sub.poll(10)  # new params wake us
                continue
            waited_since = None  # timed out: one more fragment on these params
        arrays, version = collect(s, venv, state, T, rng)
        shipped += 1
        frames = s.wire.encode("Fragment", {"version": version}, arrays)
        while not s.stop:  # a full shard blocks us: keep heartbeating meanwhile
            try:
                s.push.send_multipart(frames, flags=zmq.NOBLOCK)
                s.sent += 1
                break
            except zmq.Again:
                if time.monotonic() >= next_hb:
                    s.heartbeat()
                    next_hb = time.monotonic() + s.hb
                time.sleep(0.005)
        if s.sent % 50 == 1:
            log("fragments_sent", sent=s.sent, version=version)
    if s.reg is not None:
        s.reg.send_multipart(s.wire.encode("Deregister", {"incarnation": s.incarnation}))
    log("stopped", reason=s.stop or "time", sent=s.sent)
    s.ctx.destroy(0)
    sys.exit(0)


if __name__ == "__main__":
    main()
