"""The trainer: one algorithm, its observation statistics, version and env
steps; it updates on batches, makes params messages and checkpoints, and drives
the one learner loop that learners and gossip peers share:

    batch = await feed.next(); learned = update(batch); await feed.done(learned)
    then the owner's hook, publish when due, checkpoint when due.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .. import wire
from ..algos import make_algorithm
from ..algos.base import GradReduce, Learned, Progress, resolve_device
from ..algos.optim import Adam
from ..checkpoint import load as load_checkpoint
from ..checkpoint import (
    numpy_state,
    policy_state,
    save_atomic,
    save_folder_atomic,
    write_checkpoint,
)
from ..comm.stalls import Stalls
from ..config import Job, dumps_job
from ..config.wiring import REQUESTS
from ..envs.spec import EnvSpec
from ..files import clean_temporaries, free_mb
from ..log import write_failed
from ..normalize import RunningMeanStd, obs_norm, scale_rewards
from .critic_watch import CriticWatch
from .data_parallel import LearnerGroup
from .health import HealthWatch, NonFinite, max_entropy
from .histograms import snapshot
from .state import TrainState

if TYPE_CHECKING:
    from .feed import Feed

Hook = Callable[[], Awaitable[None]]


class Trainer:
    """A learner's state and its update, params and checkpoint steps."""

    def __init__(self, job: Job, spec: EnvSpec, checkpoint_dir: Path, log: Any,
                 reduce_grads: GradReduce | None = None,
                 sum_steps: Callable[[int], int] | None = None, primary: bool = True):
        self.job, self.spec, self.log = job, spec, log
        # data-parallel learners: the group's env steps after each update, and only
        # the primary (rank 0) writes checkpoints
        self.sum_steps, self.primary = sum_steps, primary
        self.checkpoint_dir = checkpoint_dir
        self.rms = obs_norm(spec)
        self.ret_rms = RunningMeanStd(())  # environment.normalize_reward (on-policy)
        norm = job.environment.normalize_obs
        # demonstrations are raw observations: they are normalised like the fragments
        transform = (lambda x: self.rms.normalize(x, job.environment.clip_obs)) if norm else None
        self.device = resolve_device(job.training.device)
        self.algo = make_algorithm(job, spec, self.device, obs_transform=transform,
                                   reduce_grads=reduce_grads)
        self.state = TrainState()
        self.rng = np.random.default_rng(job.experiment.seed)  # checkpointed: exact resume
        self.returns: deque[float] = deque(maxlen=100)
        self.last_metrics: dict[str, float] = {}
        H = job.logging.health  # the same grace and patience as the health checks'
        self.critic = CriticWatch(rewards_scaled=job.environment.normalize_reward,
                                  grace=H.grace_updates, patience=H.patience_updates)
        self.health = HealthWatch(job, max_entropy(spec), spikes=self.algo.on_policy,
                                  clip=job.algorithm.params.grad_clip())
        self.learn_s = 0.0
        self.diverged = NonFinite(job.training.max_nonfinite_updates)
        self.stalls = Stalls(log, 2 * job.launch.liveness_timeout_s)
        # the policy's arrays as they were before the update running now (None: not
        # taken since the weights last changed); see `arrays`
        self.held: dict[str, np.ndarray] | None = None
        self.updating = False
        # something asks for `arrays` from the event loop while an update runs (a gossip
        # peer answering pulls): only then is a copy taken before each update; a learner
        # publishes between updates, and resends what it published
        self.read_during_updates = False
        # a gossip peer sharing experience: the batch, widened with its neighbours'
        self.widen: Callable[[Mapping[str, np.ndarray]], Mapping[str, np.ndarray]] | None = None
        self.updates_here = 0  # updates by this process (a restart counts afresh)
        self.next_ckpt = job.checkpoint.interval_steps
        self.next_snapshot = 0.0  # monotonic time of the next latest.pt-only write
        for p in clean_temporaries(checkpoint_dir) if self.primary else []:
            log.info("temporary_removed", path=str(p))  # a killed writer's leftover
        self._resume()

    # -- what fragments tell ------------------------------------------------------

    def observe(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Every accepted fragment: its finished episodes and observation moments."""
        if "ep_return" in arrays:
            self.returns.extend(np.asarray(arrays["ep_return"], np.float64).tolist()[-100:])
        if self.job.environment.normalize_obs:
            with contextlib.suppress(KeyError, ValueError, IndexError):
                self.rms.merge_moments(arrays)

    def mean_return(self) -> float:
        return float(np.mean(self.returns)) if self.returns else 0.0

    # -- updates and params -------------------------------------------------------

    async def update(self, batch: Mapping[str, np.ndarray]) -> Learned:
        """One update in a worker thread (heartbeats and receiving go on meanwhile)."""
        steps, total = self.state.env_steps, self.job.training.total_timesteps
        at = Progress(env_steps=steps, fraction=min(1.0, steps / total))
        E = self.job.environment
        if E.normalize_reward and self.algo.on_policy:
            batch = scale_rewards(batch, self.ret_rms, self.algo.params.gamma, E.clip_reward)
        if self.held is None and self.read_during_updates:
            self.held = self.algo.wire_arrays()
        t0 = time.monotonic()
        self.updating = True
        try:
            learned = await asyncio.to_thread(self.algo.learn, batch, at)
        finally:
            self.updating, self.held = False, None
        dt = time.monotonic() - t0
        self.learn_s += dt
        self.state.version += 1
        self.last_metrics = learned.metrics
        self.diverged.see(learned.metrics, self.state.version)
        if (flat := self.critic.check(learned.metrics)) is not None:
            self.log.warning("critic_flat", version=self.state.version, **flat)
        for event, fields in self.health.update(learned.metrics):
            self.log.warning(event, version=self.state.version, **fields)
        every = self.job.logging.histograms_interval
        if every and self.state.version % every == 0:
            self.log.info("histograms", version=self.state.version, env_steps=steps,
                          **snapshot(batch, learned.samples, self.algo.policy_module(),
                                     self.state.version))
        self.log.debug("updated", version=self.state.version, learn_s=round(dt, 4))
        if self.updates_here == 0:  # this process trains: what a restart waits for
            self.log.info("first_update", version=self.state.version,
                          env_steps=self.state.env_steps)
        self.updates_here += 1
        return learned

    def arrays(self) -> dict[str, np.ndarray]:
        """What travels: the policy's arrays and, when normalising, the statistics
        they were trained with. While an update runs (in its thread) the policy's
        are those held before it: the event loop asks meanwhile (a gossip peer
        answering a pull), and the live weights would be a mix of two versions
        under the older one's number."""
        if not self.updating:
            self.held = self.algo.wire_arrays()
        assert self.held is not None, "arrays asked for during an update: set read_during_updates"
        out = dict(self.held)
        if self.job.environment.normalize_obs:
            out.update(self.rms.to_arrays())
        return out

    def _load_policy(self, arrays: dict[str, np.ndarray]) -> None:
        """What `arrays` carries: the policy and, when normalising, its statistics."""
        self.algo.load_policy_arrays(arrays)
        self.weights_changed()
        if self.job.environment.normalize_obs:
            self.rms.load_arrays(arrays)

    def weights_changed(self) -> None:
        """The weights changed outside an update (loaded, or a group's broadcast):
        what `arrays` held is gone."""
        self.held = None

    def take_group_state(self, group: LearnerGroup) -> None:
        """A data-parallel group just formed: rank 0's parameters, optimiser moments
        and counters, broadcast to every rank (blocking: run in a thread)."""
        owned = [getattr(self.algo, a) for a in self.algo.state_attrs]
        modules = [v for v in owned if isinstance(v, torch.nn.Module) or torch.is_tensor(v)]
        opts = [v for v in owned if isinstance(v, Adam)]
        s = self.state
        s.env_steps, s.version, updates = group.broadcast_state(
            modules, opts, [s.env_steps, s.version, self.algo.updates])
        self.algo.take_updates(updates)
        self.weights_changed()
        group.group_steps = s.env_steps

    def load_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        """Take params from elsewhere (a gossip mix): a new version."""
        self._load_policy(arrays)
        self.state.version += 1

    def take_followed(self, p: wire.Params | None) -> None:
        """A warm spare's takeover: the params it followed (`verl_zmq.follow`) where
        they are newer than the snapshot it resumed from: the policy, its statistics
        and the counters continue from the killed trainer's last published version
        (the optimiser and anything else unpublished stay the snapshot's)."""
        if p is None or p.version <= self.state.version:
            return
        before = self.state.version
        try:
            self._load_policy(dict(p.arrays))
        except (ValueError, KeyError) as e:  # another job's params: keep the snapshot
            self.log.warning("followed_params_refused", error=str(e)[:200])
            return
        self.state.version, self.state.env_steps = p.version, max(self.state.env_steps,
                                                                   p.env_steps)
        self.algo.take_updates(max(self.algo.updates, p.updates))
        self.log.info("followed_params_taken", version=p.version, env_steps=p.env_steps,
                      snapshot_version=before)

    def params(self, final: bool = False) -> wire.Params:
        return wire.Params(version=self.state.version, env_steps=self.state.env_steps,
                           updates=self.algo.updates, final=final, arrays=self.arrays())

    # -- the loop -----------------------------------------------------------------

    async def run(self, feed: Feed, publish: Hook, after_update: Hook) -> None:
        """Train until `training.total_timesteps` env steps; the feed decides where
        batches come from, the hook what else happens after each update. The
        trainer alone writes its counters: env steps as the feed reports them."""
        T = self.job.training
        resyncs: set[asyncio.Task[None]] = set()  # (held: a loop keeps weak references)

        def resync() -> None:  # a stalled wait: reconnect with fresh credits
            task = asyncio.get_running_loop().create_task(feed.resync())
            resyncs.add(task)
            task.add_done_callback(resyncs.discard)

        while self._count(feed) < T.total_timesteps:
            async with self.stalls.watch(REQUESTS.name, lambda: feed.shards()
                                         or ["no shard of its group is alive"], resync):
                batch = await feed.next()
            self._count(feed)
            if batch is None:
                continue
            if self.widen is not None:  # a gossip peer's neighbours' experience beside it
                batch = self.widen(batch)
            learned = await self.update(batch) if T.learn else None  # learn=false: drain
            await feed.done(learned)
            self._count(feed)  # what arrived during the update counts before the checks
            if learned is None:
                continue
            if self.sum_steps is not None:  # every rank ends, publishes, saves alike
                self.state.env_steps = await asyncio.to_thread(self.sum_steps,
                                                               self.state.env_steps)
            await after_update()
            if self._episode_target_reached():
                await publish()
                break
            if T.update_delay_s > 0:
                await asyncio.sleep(T.update_delay_s)
            if self.state.version % T.sync_interval_updates == 0:
                await publish()
            if self.state.env_steps >= self.next_ckpt:
                interval = self.job.checkpoint.interval_steps
                self.next_ckpt = (self.state.env_steps // interval + 1) * interval
                await asyncio.to_thread(self.checkpoint)
            elif self.job.checkpoint.snapshot_interval_s > 0 \
                    and time.monotonic() >= self.next_snapshot:
                await asyncio.to_thread(self.snapshot)
        self._count(feed)
        feed.drain()

    def _episode_target_reached(self) -> bool:
        """`training.stop_at_episode_return` met by a full window of 100 episodes."""
        target = self.job.training.stop_at_episode_return
        if target is None or len(self.returns) < (self.returns.maxlen or 0) \
                or self.mean_return() < target:
            return False
        self.log.info("episode_target_reached", target=target,
                      episode_return_mean=round(self.mean_return(), 3),
                      env_steps=self.state.env_steps, version=self.state.version)
        return True

    def _count(self, feed: Feed) -> int:
        self.state.env_steps = feed.env_steps(self.state.env_steps)
        return self.state.env_steps

    # -- checkpoints --------------------------------------------------------------

    def _state(self) -> dict[str, Any]:
        s = self.state
        return {**policy_state(dumps_job(self.job), self.job.algorithm.name,
                               self.algo.policy_arrays(), self.rms.to_arrays()),
                "algo": self.algo.state_dict(), "env_steps": s.env_steps,
                "version": s.version, "updates": self.algo.updates,
                "ret_rms": numpy_state(self.ret_rms.to_arrays("ret_rms/")),
                "torch_rng": torch.get_rng_state(),
                "numpy_rng": json.dumps(self.rng.bit_generator.state)}

    def _may_write(self, skipped: str) -> bool:
        """Whether this learner writes checkpoints (the primary) and the disk has
        `checkpoint.min_free_mb` free; a nearly full disk is warned of as `skipped`."""
        if not self.primary:
            return False
        d, need = self.checkpoint_dir, self.job.checkpoint.min_free_mb
        if need and (free := free_mb(d)) < need:
            self.log.warning(skipped, path=str(d), free_mb=round(free, 1),
                             min_free_mb=need, env_steps=self.state.env_steps)
            return False
        return True

    def checkpoint(self) -> None:
        """A step checkpoint and latest.pt, unless the disk is nearly full
        (`checkpoint.min_free_mb`: skipped with a warning) or the write fails (said
        once on stderr; the last good checkpoint stays)."""
        if not self._may_write("checkpoint_skipped"):
            return
        d = self.checkpoint_dir
        try:
            path = write_checkpoint(d, self.state.env_steps, self._state(),
                                    self.job.checkpoint.keep)
        except OSError as e:
            write_failed(self.log, "checkpoint_failed", d, e, "keeping the last good checkpoint")
            return
        self.log.info("checkpoint_saved", path=str(path), env_steps=self.state.env_steps,
                      version=self.state.version)
        save_pretrained = getattr(self.algo, "save_pretrained", None)
        if save_pretrained is not None:  # a Hugging Face model: its folder beside (hf/)
            try:
                save_folder_atomic(save_pretrained, d / "hf")
            except OSError as e:
                write_failed(self.log, "checkpoint_failed", d / "hf", e,
                             "keeping the last good folder")
                return
            self.log.info("hf_checkpoint_saved", path=str(d / "hf"),
                          env_steps=self.state.env_steps, version=self.state.version)

    def snapshot(self) -> None:
        """latest.pt alone (what a restart resumes from), between step checkpoints;
        skipped like a checkpoint when the disk is nearly full or the write fails."""
        interval = self.job.checkpoint.snapshot_interval_s
        self.next_snapshot = time.monotonic() + interval
        if not self._may_write("snapshot_skipped"):
            return
        d = self.checkpoint_dir
        t0 = time.monotonic()
        try:
            d.mkdir(parents=True, exist_ok=True)
            save_atomic(self._state(), d / "latest.pt")
        except OSError as e:
            write_failed(self.log, "snapshot_failed", d, e, "keeping the last good checkpoint")
            return
        took = time.monotonic() - t0
        # a big model takes long to write: writing stays under 5% of the time
        self.next_snapshot = time.monotonic() + max(interval, 20 * took)
        self.log.debug("learner_snapshot", env_steps=self.state.env_steps,
                       version=self.state.version, seconds=round(took, 3))

    def _resume(self) -> None:
        path = self.checkpoint_dir / "latest.pt"
        if not path.exists():
            return
        # read onto the CPU whatever device wrote it: modules and optimisers copy into
        # their own device, and the RNG state and statistics must stay on the CPU
        state = load_checkpoint(path)
        self.algo.load_state_dict(state["algo"])
        self.state.env_steps = int(state["env_steps"])
        self.state.version = int(state["version"])
        self.rms.load_arrays({k: v.numpy() for k, v in state["rms"].items()})
        if "ret_rms" in state:
            self.ret_rms.load_arrays({k: v.numpy() for k, v in state["ret_rms"].items()},
                                     "ret_rms/")
        torch.set_rng_state(state["torch_rng"])
        if "numpy_rng" in state:
            self.rng.bit_generator.state = json.loads(state["numpy_rng"])
        interval = self.job.checkpoint.interval_steps
        self.next_ckpt = (self.state.env_steps // interval + 1) * interval
        self.log.info("resumed", checkpoint=str(path), env_steps=self.state.env_steps,
                      version=self.state.version, updates=self.algo.updates)

    def metrics(self, r: str) -> dict[str, float]:
        out: dict[str, float] = {
            f"{r}/env_steps": self.state.env_steps, f"{r}/updates": self.algo.updates,
            f"{r}/policy_version": self.state.version, f"{r}/learn_s": round(self.learn_s, 3),
            f"{r}/stalls": self.stalls.count}
        if self.returns:
            out[f"{r}/episode_return_mean"] = round(self.mean_return(), 3)
        if torch.device(self.device).type == "cuda":  # what the job's GPU must hold at most
            out[f"{r}/gpu_mem_peak_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
        out.update({k: round(float(v), 6) for k, v in self.last_metrics.items()})
        return out
