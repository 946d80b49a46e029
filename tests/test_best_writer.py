"""The evaluator writes best.pt behind its evaluations: a slow write (the first
imports torch where the evaluator was not forked with it) holds none of them,
the newest best waiting is the one written next, and the role does not stop
before its best is on disk."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

from verl_zmq.roles import best_writer, evaluator


def test_best_pt_is_written_behind_the_evaluations_newest_first(tmp_path, monkeypatch):
    written: list[dict] = []
    gate = threading.Event()

    def slow_write(path, job_text, algorithm, policy, rms, meta):
        gate.wait(30)  # the first write: as long as the test holds it
        written.append(meta)

    monkeypatch.setattr(best_writer, "write_best", slow_write)
    role = object.__new__(evaluator.EvaluatorRole)
    role.ctx = SimpleNamespace(run_dir=str(tmp_path))
    role.best_writer = best_writer.BestWriter(SimpleNamespace())

    async def main() -> None:
        for v in (1, 2, 3):  # three bests while the first is being written
            role._keep_best((tmp_path / "best.pt", "job", "ppo", {}, None, {"version": v}))
            await asyncio.sleep(0.05)
        assert written == []  # the evaluations went on: nothing waited for the write
        gate.set()
        await role.teardown()  # stopping waits for the best on disk

    asyncio.run(main())
    assert [m["version"] for m in written] == [1, 3]  # 2 was passed over for 3
