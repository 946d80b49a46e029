"""A trainer that takes over never publishes a version below one its group has
used: the registry keeps the highest params version each group's heartbeats
report and hands it back in every reply; a learner whose own is below it numbers
its next params above it (gossip peers, whose versions are each their own, do not)."""

from __future__ import annotations

from types import SimpleNamespace

from verl_zmq import wire
from verl_zmq.roles.learner import LearnerRole
from verl_zmq.roles.registry import RegistryRole


def _registry() -> tuple[RegistryRole, list[wire.Message]]:
    reg = RegistryRole.__new__(RegistryRole)  # its state, no sockets
    reg.members, reg.identity, reg.last_seen, reg.seen = {}, {}, {}, {}
    reg.seq, reg.versions, reg.shutdown_reason, reg.refused, reg.dropped = 0, {}, "", 0, 0
    reg.endpoints = {"membership": "inproc://m"}
    reg.log = SimpleNamespace(info=lambda *a, **k: None, error=lambda *a, **k: None)
    replies: list[wire.Message] = []

    async def reply(ident, msg):
        replies.append(msg)

    async def publish(op, m):
        return None

    reg._reply, reg._publish = reply, publish  # type: ignore[method-assign]
    return reg, replies


async def test_the_registry_hands_back_its_groups_highest_version():
    reg, replies = _registry()
    for mid, group in (("sampler-0", "main"), ("learner-0", "main"), ("sampler-1", "other")):
        await reg._handle(b"x", wire.Register(src=mid, member=wire.Member(
            id=mid, role=mid.split("-")[0], group=group, incarnation=1)))
    for mid, version in (("sampler-0", 174), ("learner-0", 170), ("sampler-1", 900),
                         ("sampler-0", 150)):  # a lower report later does not lower it
        await reg._handle(b"x", wire.Heartbeat(src=mid, incarnation=1,
                                               status={"version": version}))
    assert [r.version_seen for r in replies[3:]] == [174, 174, 900, 174]
    await reg._handle(b"x", wire.Register(src="learner-0", member=wire.Member(
        id="learner-0", role="learner", group="main", incarnation=2)))
    assert isinstance(replies[-1], wire.RegisterReply) and replies[-1].version_seen == 174
    # a member the registry does not know changes nothing
    await reg._handle(b"x", wire.Heartbeat(src="ghost", incarnation=1, status={"version": 10**6}))
    assert reg.seen == {"main": 174, "other": 900}


def _learner(version: int, seen: int, decentralised: bool = False):
    said: list[dict] = []
    role = SimpleNamespace(
        registry_client=SimpleNamespace(version_seen=seen),
        trainer=SimpleNamespace(state=SimpleNamespace(version=version)),
        job=SimpleNamespace(traits=SimpleNamespace(decentralised=decentralised)),
        log=SimpleNamespace(info=lambda ev, **kw: said.append({"event": ev, **kw})))
    LearnerRole._above_seen(role)  # type: ignore[arg-type]
    return role.trainer.state.version, said


def test_a_learner_below_what_its_group_used_numbers_above_it():
    assert _learner(167, 174) == (175, [{"event": "version_floor_taken", "version": 167,
                                         "version_seen": 174, "now": 175}])
    assert _learner(175, 174) == (175, [])  # already above: nothing to do
    assert _learner(174, 174) == (174, [])  # the same params, republished
    assert _learner(3, 40, decentralised=True) == (3, [])  # a gossip peer's own numbers
