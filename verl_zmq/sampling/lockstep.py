"""A sampler in lock-step with its learner's versions (`experiment.deterministic`):
its k-th fragment acts with params version k // m, where m is its share of an
update's fragments (the check makes the samplers' shares equal), and params are
swapped in between fragments only. The learner cannot make version v + 1 before
it has every fragment of version v, so no sampler can miss the version it needs,
and each fragment is what it would be in any other run with the same seed."""

from __future__ import annotations

import numpy as np

from ..config import Job


class LockStep:
    """Which version the next fragment needs, and the versions heard meanwhile."""

    def __init__(self, job: Job):
        self.per_update = max(1, job.fragments_per_batch // job.sampling.num_workers)
        self.arrived: dict[int, dict[str, np.ndarray]] = {}
        self.shipped = 0

    @property
    def needed(self) -> int:
        return self.shipped // self.per_update

    def heard(self, version: int, arrays: dict[str, np.ndarray]) -> None:
        if version >= self.needed:
            self.arrived[version] = arrays

    def ready(self, current: int) -> bool:
        """The next fragment can start: its version is the policy's, or has come."""
        return current == self.needed or self.needed in self.arrived

    def take(self, current: int) -> tuple[int, dict[str, np.ndarray]] | None:
        """The params to swap in before the next fragment (None: keep the policy's)."""
        need = self.needed
        for v in [v for v in self.arrived if v < need]:
            del self.arrived[v]
        if current == need:
            return None
        return need, self.arrived.pop(need)
