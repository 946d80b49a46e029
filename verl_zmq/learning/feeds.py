"""Which feed a job's learner reads: fragments (on-policy) or sampled batches."""

from __future__ import annotations

from ..batch import job_layout
from ..config.algorithms import fill_batches
from .feed import Feed
from .fragment_feed import FragmentFeed
from .sampled_feed import SampledFeed
from .state import FeedConfig, LinkConfig
from .trainer import Trainer


def make_feed(trainer: Trainer, links: LinkConfig) -> Feed:
    """The feed for the trainer's job, reaching shards as `links` says."""
    job = trainer.job
    p, T, L = job.algorithm.params, job.training, job.launch
    cfg = FeedConfig(batch_size=p.batch_size, prefetch=T.prefetch,
                     fragment_steps=job.fragment_steps, max_lag=T.max_policy_lag,
                     max_fills=fill_batches(job),
                     fill_timeout_s=L.liveness_timeout_s,
                     priorities=job.replay.mode == "prioritized",
                     ordered=job.experiment.deterministic)
    if job.traits.on_policy:
        return FragmentFeed(links, trainer.state, job_layout(job, trainer.spec), cfg,
                            keep=trainer.algo.fragment_filter(), observe=trainer.observe)
    return SampledFeed(links, trainer.spec, cfg, trainer.rng)
