"""Which feed a job's learner reads: fragments (on-policy) or sampled batches."""

from __future__ import annotations

from ..batch import job_layout
from .fragment_feed import FragmentFeed
from .sampled_feed import SampledFeed
from .state import FeedConfig
from .trainer import Trainer


def make_feed(trainer: Trainer, links_args: dict) -> FragmentFeed | SampledFeed:
    """The feed for the trainer's job; `links_args` say how to reach shards
    (transport, log, stats, src, spawn)."""
    job = trainer.job
    p, T, L = job.algorithm.params, job.training, job.launch
    cfg = FeedConfig(batch_size=p.batch_size, prefetch=T.prefetch,
                     fragment_steps=job.fragment_steps, max_lag=T.max_policy_lag,
                     max_fills=getattr(p, "max_fill_batches", 1),
                     fill_timeout_s=L.heartbeat_interval_s * L.heartbeat_liveness,
                     priorities=job.replay.mode == "prioritized")
    if job.traits.on_policy:
        return FragmentFeed(links_args, trainer.state, job_layout(job, trainer.spec), cfg,
                            keep=trainer.algo.fragment_filter(), observe=trainer.observe)
    return SampledFeed(links_args, trainer.state, trainer.spec, cfg, trainer.rng)
