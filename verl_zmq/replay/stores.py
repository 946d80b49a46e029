"""Which store a replay shard holds, chosen where roles are chosen: from the
job's `replay.mode`.

Both implement `store.Store`, the interface the shard shell drives.
"""

from __future__ import annotations

from ..config import Job
from .fifo import FifoStore
from .offpolicy import OffPolicyStore
from .store import Store


def make_store(job: Job, index: int = 0) -> Store:
    R = job.replay
    if R.mode == "fifo":
        return FifoStore(R.capacity // max(1, job.fragment_steps),
                         drop_oldest=R.when_full == "drop_oldest")
    return OffPolicyStore(job, seed=job.experiment.seed + index)
