"""Pacing a sampler to its learner: ship no faster than the learner consumes.

Each update consumes `ceil(batch_size / fragment_steps)` fragments from the
group, so a sampler's fair share is that divided by the group's samplers: those
the registry lists now (a sampler lost with its host leaves its share to the
others). With
`sampling.lead_updates = k` a sampler may ship its share for the updates its
learner has made (as the params it hears say: `Params.updates`, not the
version, which a gossip peer also moves when it mixes in parameters without
consuming a batch) plus `k` more, so k batches are in flight. With k = 1 (the
default) that is the batch the learner trains on next: samplers collect it
after hearing the update before, sampling and learning take turns, and
fragments arrive fresh (lag 0), as in a synchronous loop but without a barrier
between samplers. With k = 2 samplers collect the next batch while the learner
trains on this one (overlap), and fragments arrive one update old. Either way
nothing piles up in shard and socket queues to be dropped for lag. A learner
heard counting from fewer updates (restarted) starts the count afresh. With
more samplers than fragments in a batch (a share below one) the samplers take
turns (`Pacer.phase`) and each may run ahead enough to have a fragment under
way, up to the learner's lag limit (`Pacer.lead_now`). No I/O:
the sampler role asks `may_ship` and reports.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..config import Job
from ..config.algorithms import filters_fragments


@dataclass
class Pacer:
    """A sampler's budget of fragments, in step with its learner's updates."""

    share: float  # fragments per update: this sampler's part of one batch
    lead: int  # updates of lead over the learner
    max_lead: int = 1  # updates of lead a fragment may have and not be dropped for lag
    phase: float = 0.0  # in [0, 1): where this sampler's turns fall among the others'
    base: int | None = None  # the update count counting started at
    latest: int = 0  # the most updates heard
    shipped: int = 0  # fragments shipped since `base`

    def heard(self, updates: int) -> None:
        """The learner's update count, from params it published."""
        if self.base is None or updates < self.latest:  # first params, or a restart
            self.base, self.latest, self.shipped = updates, updates, 0
        else:
            self.latest = max(self.latest, updates)

    def may_ship(self) -> bool:
        done = 0 if self.base is None else self.latest - self.base
        # whole fragments: with a share below one, the phase says at which updates
        # this sampler's turn comes (the epsilon absorbs rounding of exact sums)
        return self.shipped < math.floor((done + self.lead_now) * self.share + self.phase
                                         + 1e-9)

    @property
    def lead_now(self) -> int:
        """The lead, and with a share below one fragment at least enough updates
        for each sampler to have a fragment under way (many samplers, each with
        a turn every few updates: envs that wait must not sit idle between turns),
        while the fragments stay younger than the learner's lag limit."""
        if self.share >= 1.0 or self.share <= 0.0:
            return self.lead
        return max(self.lead, min(math.ceil(1.0 / self.share - 1e-9), self.max_lead))

    def share_among(self, fragments_per_batch: float, samplers: int, index: int = 0) -> None:
        """This sampler's share of each batch when `samplers` (itself included) are
        alive, it being the `index`-th of them: a lost sampler's share goes to the
        others, a new one takes its part. Turns are spread: sampler i's phase is
        frac(i x share), so that at every update the samplers together may ship
        exactly a batch (Hermite's identity), fresh, instead of all of them shipping
        at the same updates (a burst the learner drops for lag, then a wait). A new
        share counts afresh: fragments shipped at the old one would otherwise hold
        this sampler back while the learner waits for its part."""
        share = fragments_per_batch / max(1, samplers)
        phase = (index * share) % 1.0
        if share != self.share or phase != self.phase:
            self.share, self.phase = share, phase
            self.reset()

    def shipped_one(self, forgiven: bool = False) -> None:
        """Count a shipped fragment; `forgiven`: shipped because the learner made no
        progress for a while (fragments were lost: a shard died with them), so it
        stands in for a lost one and does not count against the budget."""
        if not forgiven:
            self.shipped += 1

    def reset(self) -> None:
        """Count afresh from the next params heard (a shard came or went: what it
        held is gone, and the learner waits for fragments no budget would allow)."""
        self.base, self.shipped = None, 0


def make_pacer(job: Job) -> Pacer | None:
    """The job's pacer, or None (`lead_updates = 0`, sync mode, off-policy, or a
    learner that may drop fragments before an update, as DAPO's dynamic sampling
    does: it would need more than the samplers' share and wait for it)."""
    S = job.sampling
    if S.lead_updates <= 0 or S.mode == "sync" or not job.traits.on_policy \
            or filters_fragments(job):
        return None
    # a fragment collected for the update `lead` ahead is trained on at lag lead - 1
    return Pacer(share=job.fragments_per_batch / S.num_workers, lead=S.lead_updates,
                 max_lead=max(S.lead_updates, job.training.max_policy_lag))
