"""Waits on another process are never silent (`comm/stalls.py`): one that runs past
its deadline is logged as stalled, naming the exchange and whom it waits on, and
its end as resumed; deadlines follow the pace the exchange has shown, and a stall
does not lengthen them."""

from __future__ import annotations

import asyncio

from verl_zmq.comm.stalls import SLACK, STARTUP, Stalls


class Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict]] = []

    def warning(self, event: str, **kw) -> None:
        self.lines.append(("warning", event, kw))

    def info(self, event: str, **kw) -> None:
        self.lines.append(("info", event, kw))


def test_a_wait_past_its_deadline_is_said_stalled_and_then_resumed():
    log, base = Log(), 0.3
    s = Stalls(log, base)

    async def main() -> None:
        assert s.deadline("fragments") == STARTUP * base  # start-up: nothing known yet
        for _ in range(3):  # waits that end at once: the pace is known
            async with s.watch("fragments", lambda: ["replay-0"]):
                await asyncio.sleep(0)
        assert s.deadline("fragments") == base
        async with s.watch("fragments", lambda: ["replay-0"]):
            await asyncio.sleep(4 * base)  # the shard stopped
        assert s.deadline("fragments") == base  # the stall taught it nothing
        async with s.watch("requests", lambda: ["replay-0"]):
            await asyncio.sleep(0)

    asyncio.run(main())
    assert [(lv, ev) for lv, ev, _ in log.lines] == [("warning", "exchange_stalled"),
                                                     ("info", "exchange_resumed")]
    said, back = log.lines[0][2], log.lines[1][2]
    assert said == {"exchange": "fragments", "deadline_s": base, "waiting_on": ["replay-0"]}
    assert back["exchange"] == "fragments" and back["waited_s"] >= 4 * base
    assert s.count == 1


def test_a_slow_exchange_gets_a_longer_deadline_and_start_up_is_not_its_pace():
    log, base = Log(), 0.2
    s = Stalls(log, base)

    async def main() -> None:
        async with s.watch("params", lambda: ["learner-0"]):
            await asyncio.sleep(0.2)  # start-up: as long as a base deadline, within ten...
        assert s.deadline("params") == STARTUP * base  # ...and not taken as the pace
        async with s.watch("params", lambda: ["learner-0"]):
            await asyncio.sleep(0.1)  # a learner whose updates take a while
        assert s.deadline("params") >= SLACK * 0.1 > base

    asyncio.run(main())
    assert log.lines == [] and s.count == 0
