"""The counters a learner's feed and trainer share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..comm.messaging import WireStats
from ..config.sections import ceil_div


@dataclass
class TrainState:
    """The trainer's counters; the trainer is their one writer. `version` counts
    updates (and gossip mixes): the feed reads it to measure a fragment's policy
    lag. `env_steps` counts the job's env steps as the feed reports them
    (`Feed.env_steps`): schedules, checkpoints and the end read it."""

    version: int = 0
    env_steps: int = 0


@dataclass(frozen=True)
class LinkConfig:
    """How a feed reaches its shards: the transport to connect with, the log and
    wire counters to report into, and the id it sends as."""

    transport: Any  # verl_zmq.comm.transport.Transport (zmq stays out of the type's import)
    log: Any
    stats: WireStats
    src: str


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
    # on-policy, experiment.deterministic: a batch's fragments in the order of their
    # samplers and sequence numbers, not of their arrival
    ordered: bool = False

    @property
    def per_batch(self) -> int:
        return ceil_div(self.batch_size, self.fragment_steps)
