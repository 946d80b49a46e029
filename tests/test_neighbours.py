"""A gossip peer's neighbours (learning/gossip/neighbours.py): one that does not
answer is dropped; if the registry still lists it (slow, not dead: a host
starting up, or held to a CPU share) it is asked again after a wait that
doubles while it stays silent, so a slow start never leaves a peer alone; one
the registry dropped stays dropped."""

from __future__ import annotations

from types import SimpleNamespace

from verl_zmq import wire
from verl_zmq.learning.gossip import neighbours
from verl_zmq.learning.gossip.neighbours import Neighbours


class _Transport:
    def __init__(self):
        self.closed = 0

    def connect_edge(self, edge, endpoint):
        return object()

    def close_socket(self, sock):
        self.closed += 1


def _member(i: int) -> wire.Member:
    return wire.Member(id=f"peer-{i}", role="peer", index=i,
                       endpoints={"gossip": f"tcp://127.0.0.1:{7000 + i}"})


def _nb(monkeypatch, clock):
    monkeypatch.setattr(neighbours.time, "monotonic", lambda: clock[0])
    logged = []
    nb = Neighbours("peer-0", _Transport(), SimpleNamespace(
        info=lambda event, **kw: logged.append((event, kw))), lambda pid: None)
    nb.on_membership({m.id: m for m in (_member(0), _member(1), _member(2))})
    return nb, logged


def _silent(nb, pid):
    nb.silent(pid, nb.dealer(pid))


def _after(nb, clock, seconds) -> set[str]:
    """The peers known once `seconds` have passed and the quiet ones were retried."""
    clock[0] += seconds
    nb.retry_quiet()
    return set(nb.peers)


def test_a_silent_peer_the_registry_lists_is_asked_again_after_a_doubling_wait(monkeypatch):
    clock = [100.0]
    nb, logged = _nb(monkeypatch, clock)
    assert set(nb.peers) == {"peer-1", "peer-2"}
    _silent(nb, "peer-1")
    assert "peer-1" not in nb.peers  # not chosen while it is quiet
    assert "peer-1" not in _after(nb, clock, neighbours.RETRY_QUIET_S - 0.1)
    assert "peer-1" in _after(nb, clock, 0.2)  # asked again
    assert ("peer_learned", {"member": "peer-1", "via": "retry", "peers": 2}) in logged
    _silent(nb, "peer-1")  # still silent: twice the wait
    assert "peer-1" not in _after(nb, clock, neighbours.RETRY_QUIET_S + 0.1)
    assert "peer-1" in _after(nb, clock, neighbours.RETRY_QUIET_S)
    nb.answered("peer-1")  # it answered: a later silence waits the first wait again
    _silent(nb, "peer-1")
    assert "peer-1" in _after(nb, clock, neighbours.RETRY_QUIET_S + 0.1)


def test_a_wait_never_exceeds_forget_dead_s(monkeypatch):
    clock = [0.0]
    nb, _ = _nb(monkeypatch, clock)
    for _ in range(8):
        _silent(nb, "peer-2")
        assert "peer-2" in _after(nb, clock, neighbours.FORGET_DEAD_S + 0.1)


def test_a_silent_peer_the_registry_dropped_is_not_asked_again(monkeypatch):
    clock = [0.0]
    nb, _ = _nb(monkeypatch, clock)
    _silent(nb, "peer-2")
    nb.on_membership({m.id: m for m in (_member(0), _member(1))})  # the registry dropped it
    assert _after(nb, clock, 1000.0) == {"peer-1"} and not nb.quiet
