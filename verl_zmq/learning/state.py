"""The counters a learner's feed and trainer share."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TrainState:
    """`version` counts updates (and gossip mixes): the feed reads it to measure a
    fragment's policy lag. `env_steps` counts the job's env steps as the feed
    learns of them: the trainer reads it for schedules, checkpoints and the end."""

    version: int = 0
    env_steps: int = 0


@dataclass(frozen=True)
class FeedConfig:
    """How much a feed asks for and keeps."""

    batch_size: int  # env steps (on-policy) or transitions (off-policy) per update
    prefetch: int = 2  # credits kept outstanding beyond one batch, per shard
    fragment_steps: int = 1  # env steps per fragment (T x E): credits per batch
    max_lag: int = 4  # on-policy: older fragments are dropped, counted
    max_fills: int = 1  # with a fragment filter: batches drawn at most per update
    fill_timeout_s: float = 5.0  # ... and how long to wait for each extra one
    priorities: bool = True  # off-policy: send new priorities back (prioritised shards)

    @property
    def per_batch(self) -> int:
        return -(-self.batch_size // max(1, self.fragment_steps))
