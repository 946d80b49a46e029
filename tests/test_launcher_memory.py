"""The launcher keeps its size: children reaped without a thread each, and freed
heap memory handed back."""

from __future__ import annotations

import asyncio
import sys
import threading

import pytest

from launcher import memory


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.12 reaps through pidfds itself")
def test_children_are_reaped_without_a_thread_each():
    async def children() -> tuple[list[int], int]:
        before = threading.active_count()
        procs = [await asyncio.create_subprocess_exec(sys.executable, "-c",
                                                      f"import sys; sys.exit({i})")
                 for i in range(5)]
        during = threading.active_count()
        return [await p.wait() for p in procs], during - before

    async def main() -> tuple[list[int], int]:
        with memory.reaping_through_pidfds() as used:
            assert used
            return await children()

    codes, threads = asyncio.run(main())
    assert codes == [0, 1, 2, 3, 4] and threads == 0
    # afterwards a loop in another thread (a notebook's launch) still runs children
    out: dict[str, tuple[list[int], int]] = {}
    t = threading.Thread(target=lambda: out.update(r=asyncio.run(children())))
    t.start()
    t.join(60)
    assert out["r"][0] == [0, 1, 2, 3, 4]


def test_the_trim_loop_runs_until_cancelled():
    async def main() -> None:
        t = asyncio.create_task(memory.trim_loop(every_s=0.01))
        await asyncio.sleep(0.05)
        assert not t.done()  # glibc's malloc_trim called, nothing raised
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t

    asyncio.run(main())
