"""A replay-ratio limiter after Reverb's SampleToInsertRatio.

With `samples_per_insert` = r, `min_size_to_sample` = m and `error_buffer` = b:
sampling waits while fewer than m items were inserted or while
samples > r * inserts + b (the learner is ahead); inserting waits while
samples < r * inserts - b (the learner is behind). r = 0 turns it off (only the
minimum size applies).
"""

from __future__ import annotations

from dataclasses import dataclass


class LimiterError(ValueError):
    """A limiter configuration that could deadlock."""


@dataclass
class RateLimiter:
    """Counts inserted and sampled items and says which side may proceed."""

    samples_per_insert: float
    min_size_to_sample: int
    error_buffer: float
    inserted: int = 0
    sampled: int = 0

    def __post_init__(self) -> None:
        r, b = self.samples_per_insert, self.error_buffer
        if r < 0 or b < 0 or self.min_size_to_sample < 1:
            raise LimiterError("samples_per_insert and error_buffer must be >= 0 and "
                               "min_size_to_sample >= 1")
        if r > 0 and b < max(1.0, r):
            # with b < r one insert can move the balance past both bounds: deadlock
            raise LimiterError(f"replay.error_buffer ({b}) must be at least "
                               f"max(1, samples_per_insert) = {max(1.0, r)}, or the "
                               f"limiter can block sampling and inserting at once")

    def can_sample(self, n: int) -> bool:
        if self.inserted < self.min_size_to_sample:
            return False
        r = self.samples_per_insert
        return r == 0 or self.sampled + n <= r * self.inserted + self.error_buffer

    def can_insert(self, n: int) -> bool:
        r = self.samples_per_insert
        if r == 0 or self.inserted < self.min_size_to_sample:
            return True
        return self.sampled >= r * (self.inserted + n) - self.error_buffer

    def insert(self, n: int) -> None:
        self.inserted += n

    def sample(self, n: int) -> None:
        self.sampled += n
