"""CURVE: with the job's keys a client is served; without them nothing gets
through and the server logs the refusal."""

from __future__ import annotations

import pytest
import zmq

from tests.conftest import read_events, wait_for
from tests.test_registry import Cluster
from verl_zmq import wire
from verl_zmq.comm.transport import CurveKeys, curve_enabled
from verl_zmq.comm.versions import local_versions


def _try_register(endpoint: str, server_public: str, client: tuple[str, str] | None,
                  timeout: float) -> wire.Message | None:
    # a plain blocking socket with timeouts on both sides of the exchange
    ctx = zmq.Context()
    try:
        s = ctx.socket(zmq.DEALER)
        s.linger = 0
        # a refused handshake leaves the DEALER with no peer: send would block for ever
        s.sndtimeo = int(timeout * 1000)
        if client is not None:
            s.curve_serverkey = server_public.encode()
            s.curve_publickey, s.curve_secretkey = (k.encode() for k in client)
        s.connect(endpoint)
        member = wire.Member(id="intruder", role="replay", versions=local_versions())
        try:
            s.send_multipart(wire.encode(wire.Register(src="intruder", member=member)))
        except zmq.Again:  # no connection was ever admitted
            return None
        if s.poll(int(timeout * 1000)):
            return wire.decode(s.recv_multipart())
        return None
    finally:
        ctx.destroy(linger=0)


@pytest.mark.timeout(60)
def test_curve_admits_only_the_jobs_key(tmp_path, ports):
    keys = CurveKeys.generate()
    key_file = tmp_path / "keys.json"
    keys.save(key_file)
    assert (key_file.stat().st_mode & 0o077) == 0
    c = Cluster(tmp_path, ports)
    try:
        c.job.write_text(c.job.read_text() + "\n[security]\ncurve = true\n")
        p = c.start_with_args("registry", "registry", ["--keys", str(key_file)])
        wait_for(lambda: c.events("registry", "role_started"), 20, what="registry up")
        stranger = zmq.curve_keypair()
        got = _try_register(c.registry, keys.public,
                            (stranger[0].decode(), stranger[1].decode()), 2.0)
        assert got is None
        plain = _try_register(c.registry, keys.public, None, 1.0)
        assert plain is None
        wait_for(lambda: c.events("registry", "auth_denied"), 5, what="refusal logged")
        assert not c.events("registry", "member_joined")
        ok = _try_register(c.registry, keys.public, (keys.public, keys.secret), 5.0)
        assert isinstance(ok, wire.RegisterReply) and ok.ok
        assert [e["member"] for e in c.events("registry", "member_joined")] == ["intruder"]
        assert p.poll() is None
    finally:
        c.stop()


def test_keys_file_must_be_private(tmp_path):
    keys = CurveKeys.generate()
    f = tmp_path / "k.json"
    f.write_text(keys.to_json())
    f.chmod(0o644)
    with pytest.raises(PermissionError, match="chmod 600"):
        CurveKeys.load(f)


def test_curve_is_on_unless_turned_off():
    assert curve_enabled("auto") and curve_enabled(True) and not curve_enabled(False)


def test_events_are_json_lines(tmp_path):
    (tmp_path / "x.jsonl").write_text('{"event": "a"}\nnot json\n')
    assert read_events(tmp_path / "x.jsonl") == [{"event": "a"}]
