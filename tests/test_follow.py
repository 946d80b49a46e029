"""A warm spare follows its trainer: it finds the trainer's params endpoint
through the registry, keeps the newest params of that member only, and on
takeover the trainer continues from them where they are newer than its
snapshot (weights, statistics, version, env steps, updates)."""

from __future__ import annotations

import threading
import time

import numpy as np
import structlog
import zmq

from tests.conftest import CONFIGS
from verl_zmq import wire
from verl_zmq.comm.transport import CurveKeys
from verl_zmq.config import load_job
from verl_zmq.envs.make import env_spec
from verl_zmq.follow import Follower
from verl_zmq.learning.trainer import Trainer

KEYS = CurveKeys.generate()


def _registry_and_trainer(stop: threading.Event, ctx: zmq.Context) -> str:
    """A registry that answers snapshot requests with one trainer, and that
    trainer publishing params at rising versions (and another member's too)."""
    router, pub = ctx.socket(zmq.ROUTER), ctx.socket(zmq.PUB)
    for sock in (router, pub):  # CURVE servers with the job's keys, as a job's are
        sock.curve_server = True
        sock.curve_secretkey = KEYS.secret.encode()
        sock.curve_publickey = KEYS.public.encode()
    reg_port = router.bind_to_random_port("tcp://127.0.0.1")
    pub_port = pub.bind_to_random_port("tcp://127.0.0.1")
    member = wire.Member(id="learner-0", role="learner",
                         endpoints={"params": f"tcp://127.0.0.1:{pub_port}"})

    def serve() -> None:
        version = 0
        while not stop.is_set():
            if router.poll(10):
                ident, *frames = router.recv_multipart()
                assert isinstance(wire.decode(frames), wire.SnapshotRequest)
                router.send_multipart([ident, *wire.encode(
                    wire.MembershipSnapshot(members_seq=1, members=[member]))])
            version += 1
            for src in ("learner-0", "peer-9"):
                pub.send_multipart(wire.encode(wire.Params(
                    src=src, version=version if src == "learner-0" else 10**6,
                    env_steps=100 * version, updates=version,
                    arrays={"w": np.full(3, version, np.float32)})))
        router.close(0)
        pub.close(0)

    threading.Thread(target=serve, daemon=True).start()
    return f"tcp://127.0.0.1:{reg_port}"


def test_the_follower_keeps_its_members_newest_params(tmp_path):
    stop, ctx = threading.Event(), zmq.Context()
    try:
        assert Follower("tcp://127.0.0.1:1", "learner-0", str(tmp_path)).start().stop() \
            is None  # no keys in the run folder: nothing followed
        f = Follower(_registry_and_trainer(stop, ctx), "learner-0", str(tmp_path))
        f.keys = KEYS  # as from the run folder's keys.json
        f.start()
        deadline = time.monotonic() + 30
        while (f.latest is None or f.latest.version < 20) and time.monotonic() < deadline:
            time.sleep(0.05)
        got = f.stop()
        assert got is not None and got.version >= 20 and got.src == "learner-0"
        assert f.received >= 1 and float(np.asarray(got.arrays["w"])[0]) == got.version
    finally:
        stop.set()
        time.sleep(0.05)
        ctx.term()


def test_a_takeover_continues_from_newer_followed_params(tmp_path):
    job = load_job(CONFIGS / "cartpole_ppo.toml")
    t = Trainer(job, env_spec(job.environment), tmp_path, structlog.get_logger())
    t.state.version, t.state.env_steps = 30, 7680  # as resumed from a snapshot
    arrays = {k: v + 1.0 for k, v in t.algo.policy_arrays().items()}
    t.take_followed(wire.Params(version=25, env_steps=6400, updates=25, arrays=arrays))
    assert t.state.version == 30  # older than the snapshot: not taken
    t.take_followed(wire.Params(version=36, env_steps=9216, updates=36, arrays=arrays))
    assert (t.state.version, t.state.env_steps, t.algo.updates) == (36, 9216, 36)
    now = t.algo.policy_arrays()
    assert all(np.array_equal(now[k], arrays[k]) for k in arrays)
    t.take_followed(wire.Params(version=50, arrays={"w": np.zeros(3, np.float32)}))
    assert t.state.version == 36  # params that do not fit this job: refused, kept
