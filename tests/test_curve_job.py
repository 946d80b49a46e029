"""A local job under a stranger: CURVE is on by default, so a client without the
job's key (another user of the machine, uid nobody, when the suite runs as root)
connects to every bound socket of every role (with a key pair of its own, and in
plain text) and sends frames; none reaches a role (no role counts a wire error,
no PUB hands it anything), the stranger cannot read the run folder's keys, the
refusals are logged, and the job trains to its target."""

from __future__ import annotations

import json
import os
import stat

import pytest
import zmq

from tests.conftest import CONFIGS, kill_tree, read_events, start_job, wait_for

pytestmark = pytest.mark.e2e  # real processes

# a return a random CartPole policy never reaches (about 20): the job learns with
# the stranger beside it; reaching 475 is the main job's own test
TARGET = 300.0
# what a stranger connects to each kind of bound socket with
CLIENT = {"registry": zmq.DEALER, "requests": zmq.DEALER, "gossip": zmq.DEALER,
          "fragments": zmq.PUSH, "membership": zmq.SUB, "params": zmq.SUB}


def _attack(endpoints: list[tuple[str, str]], job_public: str,
            frames_each: int = 50) -> dict[str, int]:
    """Send to every endpoint as a stranger (a key pair of its own, with the job's public
    key, which is public; and in plain text); return how many frames left our sockets
    (only an admitted connection takes any) and how many a SUB received."""
    ctx = zmq.Context()
    out = {"sent": 0, "received": 0, "sockets": 0}
    server_key = job_public.encode()
    socks = []
    try:
        for name, ep in endpoints:
            for curve in (True, False):
                s = ctx.socket(CLIENT[name])
                s.linger = 0
                s.sndtimeo = 200
                s.immediate = 1  # queue only on a connection the server admitted
                if curve:
                    pub, sec = zmq.curve_keypair()
                    s.curve_serverkey, s.curve_publickey, s.curve_secretkey = server_key, pub, sec
                if CLIENT[name] == zmq.SUB:
                    s.setsockopt(zmq.SUBSCRIBE, b"")
                s.connect(ep)
                socks.append(s)
                out["sockets"] += 1
        for s in socks:
            if s.type == zmq.SUB:
                continue
            for i in range(frames_each):
                try:
                    s.send_multipart([b"\x93junk", str(i).encode()])
                    out["sent"] += 1
                except zmq.Again:
                    break  # no admitted connection to send on
        for s in socks:
            if s.type == zmq.SUB and s.poll(1000):
                out["received"] += 1
    finally:
        ctx.destroy(linger=0)
    return out


NOBODY = 65534


def _as_stranger(endpoints: list[tuple[str, str]], job_public: str, keys_file) -> dict:
    """`_attack` from another uid (nobody) when we are root, in a forked child that
    drops its ids first (libzmq is loaded already: no interpreter of ours need be
    readable by nobody); whether it could read the keys file. Not root: ourselves."""
    if os.geteuid() != 0:
        return _attack(endpoints, job_public) | {"uid": os.getuid(), "read_keys": None}
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            try:
                keys_file.read_text()
                read = True
            except OSError:
                read = False
            out = _attack(endpoints, job_public) | {"uid": os.getuid(), "read_keys": read}
            os.write(w, json.dumps(out).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r) as f:
        text = f.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0 and text, "the stranger's process failed"
    return json.loads(text)


@pytest.mark.timeout(600)
def test_a_stranger_gets_nothing_into_a_local_job(tmp_path):
    run = tmp_path / "run"
    proc = start_job(CONFIGS / "cartpole_ppo.toml", run,  # CURVE by default, nothing set
                     f"evaluation.stop_at_return={TARGET}", "logging.interval_s=1.0")
    try:
        def endpoints():
            eps = {}
            for p in (run / "logs").glob("*.jsonl"):
                for e in read_events(p):
                    if e.get("event") == "role_started" and e.get("endpoints"):
                        for name, ep in e["endpoints"].items():
                            eps[f"{e['id']}:{name}"] = ep
            names = {k.split(":")[1] for k in eps}
            return eps if {"registry", "fragments", "requests", "params"} <= names else None
        eps = wait_for(endpoints, 120, what="every role bound")
        public = [e["public_key"] for e in read_events(run / "logs" / "launcher.jsonl")
                  if e.get("event") == "curve_enabled"][0]
        assert stat.S_IMODE((run / "keys.json").stat().st_mode) == 0o600
        got = _as_stranger([(k.split(":")[1], ep) for k, ep in eps.items()], public,
                           run / "keys.json")
        _, err = proc.communicate(timeout=500)
    finally:
        kill_tree(proc)
    assert proc.returncode == 0, err[-2000:]
    assert got["sockets"] == 2 * len(eps)  # every endpoint, with a key and in plain text
    assert got["sent"] == 0 and got["received"] == 0, got
    if os.geteuid() == 0:
        assert got["uid"] == NOBODY and got["read_keys"] is False, got
    summary = json.loads((run / "summary.json").read_text())
    assert summary["best_eval_return"] >= TARGET
    denied = {p.stem for p in (run / "logs").glob("*.jsonl")
              if any(e.get("event") == "auth_denied" for e in read_events(p))}
    assert {"registry", "replay-0", "learner-0"} <= denied, denied
    for p in (run / "logs").glob("*.jsonl"):
        for e in read_events(p):
            if e.get("event") == "metrics":
                errs = [v for k, v in e.items() if k.endswith("/wire_errors")]
                assert all(v == 0 for v in errs), (p.name, e)
