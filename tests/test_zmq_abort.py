"""libzmq 4.3.5 aborts (`Assertion failed: _input_stopped`) when a heartbeat
timer closes a connecting reader's connection while its pipe is full and the
reader then drains (tools/faults/zmq_abort.py). The transport's liveness options
never arm such a timer, and a stalled subscriber with them lives and still
receives."""

from __future__ import annotations

import json
import subprocess
import sys

import zmq

from tools.harness import ROOT
from verl_zmq.comm.transport import liveness_options

TOOL = ROOT / "tools" / "faults" / "zmq_abort.py"
TIMERS = (zmq.HEARTBEAT_IVL, zmq.HEARTBEAT_TTL)


def test_no_heartbeat_timer_on_a_connecting_reader_and_no_ttl_from_a_binder():
    for kind in (zmq.SUB, zmq.PULL, zmq.DEALER):
        opts = liveness_options(kind, False, 1000, 3000)
        assert not set(TIMERS) & set(opts)
        # the kernel notices a dead peer instead, within the liveness timeout
        assert opts[zmq.TCP_KEEPALIVE] == 1 and opts[zmq.TCP_MAXRT] == 3000
        idle, cnt = opts[zmq.TCP_KEEPALIVE_IDLE], opts[zmq.TCP_KEEPALIVE_CNT]
        assert idle + cnt * opts[zmq.TCP_KEEPALIVE_INTVL] <= 3
    for kind in (zmq.PUB, zmq.XPUB, zmq.ROUTER, zmq.PULL):
        opts = liveness_options(kind, True, 1000, 3000)
        assert opts[zmq.HEARTBEAT_IVL] == 1000 and zmq.HEARTBEAT_TTL not in opts
    sender = liveness_options(zmq.PUSH, False, 1000, 3000)  # receives no messages
    assert sender[zmq.HEARTBEAT_IVL] == 1000 and sender[zmq.HEARTBEAT_TIMEOUT] == 3000
    assert liveness_options(zmq.SUB, False, 0, 3000) == {}


def test_a_stalling_subscriber_with_our_options_lives_and_receives():
    """The reproducer's worst variant (a SUB stalled past the liveness timeout again
    and again while a PUB floods it; forked after zmq's import, as roles are): it
    aborted every trial with ZMTP heartbeats on both sides."""
    variant = {"pattern": "pubsub", "liveness": "ours", "buffer": "default", "cpu": False,
               "fork": True}
    p = subprocess.run([sys.executable, str(TOOL), "--child", json.dumps(variant),
                        "--seconds", "4"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
