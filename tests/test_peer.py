"""A DAPO peer's gossip sockets: a neighbour dropped (by the registry, or
replaced by a new endpoint) while an exchange with it waits for a reply must not
fail that exchange, and with it the peer; the socket is closed once the exchange
ends."""

from __future__ import annotations

import asyncio

import pytest
import zmq
import zmq.asyncio

from tests.conftest import CONFIGS
from verl_zmq import wire
from verl_zmq.comm.transport import Transport
from verl_zmq.config import load_job
from verl_zmq.log import get_logger
from verl_zmq.roles.base import RoleContext
from verl_zmq.roles.peer import PeerRole


def _member(pid: str, ep: str) -> wire.Member:
    return wire.Member(id=pid, role="peer", group=pid.replace("-", ""), incarnation=1,
                       host="127.0.0.1", index=int(pid.split("-")[1]),
                       endpoints={"gossip": ep})


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["dropped", "replaced"])
def test_a_neighbour_lost_mid_exchange_does_not_fail_the_peer(tmp_path, how):
    job = load_job(CONFIGS / "cartpole_dapo.toml", overrides=[
        "launch.heartbeat_interval_s=0.2", "launch.heartbeat_liveness=2"])

    async def main():
        zctx = zmq.asyncio.Context()
        t = Transport(zctx, inproc=True)
        silent, ep = t.bind(zmq.ROUTER, "silent")  # takes the hello, never answers
        other, ep2 = t.bind(zmq.ROUTER, "other")
        ctx = RoleContext(job=job, role="peer", member_id="peer-0", group="peer0", index=0,
                          incarnation=1, registry="inproc://none", run_dir=tmp_path,
                          host="127.0.0.1", transport=t, log=get_logger(role="peer", id="peer-0"))
        role = PeerRole(ctx)
        await role.setup()  # binds its sockets, builds its algorithm and gossip node
        node = role.node
        try:
            node.nb.learn(_member("peer-1", ep), "registry")
            node.nb.busy.add("peer-1")
            exchange = asyncio.create_task(node._exchange("peer-1"))
            await asyncio.wait_for(silent.recv_multipart(), 5)  # it is waiting for a reply
            sock = node.nb.out["peer-1"][1]
            if how == "dropped":
                node.nb.drop("peer-1", "registry")
            else:  # the neighbour came back on another endpoint
                node.nb.learn(_member("peer-1", ep2), "registry")
            assert not sock.closed  # not under the pending recv
            await asyncio.wait_for(exchange, 10)  # ends by its timeout, no ZMQError
            assert sock.closed and not node.nb.orphans and "peer-1" not in node.nb.busy
            # a drop by the registry is not counted twice; a replaced one is kept
            assert ("peer-1" in node.peers) == (how == "replaced")
        finally:
            t.close()
            zctx.term()

    asyncio.run(main())
