"""Which store a replay shard holds, chosen where roles are chosen: from the
job's `replay.mode`.

A store is what the shard shell (`roles/replay.py`) drives, one interface for
every mode:

- `prepare(fragment) -> item` (may raise ValueError, KeyError, IndexError,
  TypeError: the fragment is rejected), `can_insert(item)`, `insert(item)`;
- `can_serve(batch_size)`, `take(batch_size) -> wire.Batch`, `untake(batch)`
  when sending it failed;
- `update_priorities_msg(msg) -> reason` (empty when applied);
- `size`, `metrics()`, and `persistent` with `state()` / `load_state()` for
  stores kept in snapshots.
"""

from __future__ import annotations

from ..config import Job
from .fifo import FifoStore
from .offpolicy import OffPolicyStore


def make_store(job: Job, index: int = 0) -> FifoStore | OffPolicyStore:
    R = job.replay
    if R.mode == "fifo":
        return FifoStore(R.capacity // max(1, job.fragment_steps),
                         drop_oldest=R.when_full == "drop_oldest")
    return OffPolicyStore(job, seed=job.experiment.seed + index)
