"""Learner: pulls experience from its group's shards, updates, publishes params.

One DEALER per shard keeps `training.prefetch` credits outstanding (credit-based
flow control), so batches are already queued when an update ends. Updates run
in `asyncio.to_thread`, so receiving and heartbeats go on meanwhile. On-policy
fragments older than `max_policy_lag` updates are dropped and counted. Params
are published on PUB every `sync_interval_updates` updates, and re-published
now and then for members that joined late.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import deque
from pathlib import Path

import numpy as np
import torch
import zmq
import zmq.asyncio

from .. import wire
from ..algos import make_algorithm
from ..checkpoint import load as load_checkpoint
from ..checkpoint import policy_state, write_checkpoint
from ..config import dumps_job
from ..envs import EnvSpec, env_spec
from ..normalize import RunningMeanStd
from .base import Role, recv, send

REPUBLISH_S = 2.0


def fragment_problem(a: dict, spec: EnvSpec, T: int, extras: tuple[str, ...]) -> str:
    """Does a fragment fit this job's env and algorithm? Empty when it does."""
    try:
        E = a["reward"].shape[1]
        want = {"obs": (T, E, *spec.obs_shape), "reward": (T, E), "terminated": (T, E),
                "truncated": (T, E), "valid": (T, E),
                "action": (T, E) if spec.discrete else (T, E, spec.n_actions),
                "bootstrap_obs": (E, *spec.obs_shape)}
        want.update({k: (T, E) for k in extras})
        want.update({f"bootstrap_{k}": (E,) for k in extras})
    except (KeyError, IndexError) as e:
        return f"missing or misshapen reward: {e}"
    for k, shape in want.items():
        if k not in a:
            return f"missing array {k!r}"
        if tuple(a[k].shape) != shape:
            return f"{k} has shape {tuple(a[k].shape)}, expected {shape}"
    if spec.discrete:
        act = a["action"]
        out_of_range = act.size and (act.min() < 0 or act.max() >= spec.n_actions)
        if act.dtype.kind not in "iu" or out_of_range:
            return "actions out of the discrete range"
    for k in ("obs", "reward", *extras):
        if a[k].dtype.kind != "f" or not np.isfinite(a[k]).all():
            return f"{k} is not finite floats"
    return ""


def concat_fragments(frags: list[dict], extras: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Stack fragments side by side along the env axis: [T, sum E, ...]."""
    keys = ["obs", "action", "reward", "terminated", "truncated", "valid", *extras]
    out = {k: np.concatenate([f[k] for f in frags], axis=1) for k in keys}
    for k in extras:
        out[f"bootstrap_{k}"] = np.concatenate([f[f"bootstrap_{k}"] for f in frags])
    out["bootstrap_obs"] = np.concatenate([f["bootstrap_obs"] for f in frags])
    return out


class LearnerRole(Role):
    """Runs the algorithm's updates on experience from its group's shards."""

    name = "learner"

    async def setup(self) -> None:
        job = self.job
        res = getattr(job.resources, self.name)
        torch.set_num_threads(res.cpu or job.training.torch_threads)
        torch.manual_seed(job.experiment.seed)
        np.random.seed(job.experiment.seed)
        self.spec = env_spec(job.environment)
        self.algo = make_algorithm(job, self.spec, job.training.device)
        self.rms = RunningMeanStd(self.spec.obs_shape)
        if job.environment.normalize_obs:  # demonstrations are raw: normalise them alike
            self.algo.obs_transform = lambda x: self.rms.normalize(x, job.environment.clip_obs)
        self.pub, pub_ep = self.ctx.transport.bind(zmq.PUB, "params", hwm=8)
        self.endpoints = {"params": pub_ep}
        self.dealers: dict[str, tuple[str, zmq.asyncio.Socket]] = {}
        self.readers: dict[str, asyncio.Task] = {}
        self.batches: asyncio.Queue = asyncio.Queue()  # off-policy: sampled batches
        self.shard_steps: dict[object, int] = {}
        self.shard_sizes: dict[object, int] = {}
        self.credit_out: dict[object, int] = {}  # off-policy: batches requested, per shard
        self.rng = np.random.default_rng(job.experiment.seed)
        self.shards_changed = asyncio.Event()
        self.data_ready = asyncio.Event()
        self.pending: deque[dict] = deque()
        self.pending_steps = 0
        self.env_steps = 0
        self.version = 0
        self.dropped = 0
        self.rejected = 0
        self.lags: deque[int] = deque(maxlen=200)
        self.by_sampler: dict[str, int] = {}  # fragments received from each sampler
        self.returns: deque[float] = deque(maxlen=100)
        self.last_metrics: dict[str, float] = {}
        self.learn_s = 0.0
        self.next_ckpt = job.checkpoint.interval_steps
        self.finished = False
        self._rate = (time.monotonic(), 0, 0)
        self._resume()

    # -- state ------------------------------------------------------------------

    def _ckpt_state(self) -> dict:
        return {**policy_state(dumps_job(self.job), self.job.algorithm.name,
                               self.algo.policy_arrays(), self.rms.to_arrays()),
                "algo": self.algo.state_dict(), "env_steps": self.env_steps,
                "version": self.version, "updates": self.algo.updates,
                "torch_rng": torch.get_rng_state(),
                "numpy_rng": json.dumps(self.rng.bit_generator.state)}

    def _resume(self) -> None:
        path = self.checkpoint_dir() / "latest.pt"
        if not path.exists():
            return
        state = load_checkpoint(path, self.job.training.device)
        self.algo.load_state_dict(state["algo"])
        self.env_steps = int(state["env_steps"])
        self.version = int(state["version"])
        self.rms.load_arrays({k: v.numpy() for k, v in state["rms"].items()})
        torch.set_rng_state(state["torch_rng"])
        if "numpy_rng" in state:
            self.rng.bit_generator.state = json.loads(state["numpy_rng"])
        self.next_ckpt = (self.env_steps // self.job.checkpoint.interval_steps + 1) \
            * self.job.checkpoint.interval_steps
        self.log.info("resumed", checkpoint=str(path), env_steps=self.env_steps,
                      version=self.version, updates=self.algo.updates)

    def checkpoint_dir(self) -> Path:
        return Path(self.ctx.run_dir) / "checkpoints"

    def _checkpoint(self) -> None:
        path = write_checkpoint(self.checkpoint_dir(), self.env_steps, self._ckpt_state(),
                                self.job.checkpoint.keep)
        self.log.info("checkpoint_saved", path=str(path), env_steps=self.env_steps,
                      version=self.version)

    # -- membership -------------------------------------------------------------

    def on_membership(self, members) -> None:
        super().on_membership(members)
        self.shards_changed.set()

    async def _shards_loop(self) -> None:
        p = self.algo.params
        while True:
            # level-triggered: reconcile on every membership change and at least once
            # per heartbeat interval, so a missed wake-up costs one interval, not the job
            try:
                async with asyncio.timeout(self.job.launch.heartbeat_interval_s):
                    await self.shards_changed.wait()
            except TimeoutError:
                pass
            self.shards_changed.clear()
            # a shard is its endpoint *and* incarnation: a restarted shard may bind the
            # same port, but it knows nothing of our credits, so we connect afresh
            wanted = {m.id: (m.endpoints.get("requests", ""), m.incarnation)
                      for m in self.group_members("replay").values()}
            for mid, (ep, sock) in list(self.dealers.items()):
                if wanted.get(mid) != ep:
                    # stop its reader before closing: a socket is used by one task only
                    self.readers.pop(mid).cancel()
                    self.ctx.transport.close_socket(sock)
                    del self.dealers[mid]
                    self.shard_sizes.pop(sock, None)
                    self.credit_out.pop(sock, None)
                    self.log.info("shard_disconnected", member=mid, endpoint=ep[0],
                                  shard_incarnation=ep[1])
            for mid, (ep, inc) in wanted.items():
                if ep and mid not in self.dealers:
                    sock = self.ctx.transport.connect(zmq.DEALER, ep, hwm=1000)
                    self.dealers[mid] = ((ep, inc), sock)
                    # in the role's TaskGroup: a reader that crashes stops the role
                    self.readers[mid] = self.tasks.create_task(self._read_shard(sock))
                    per_batch = -(-p.batch_size // self.job.fragment_steps)
                    # on-policy: credits count fragments; off-policy: sampled batches
                    credit = self.job.training.prefetch + (per_batch if self.algo.on_policy
                                                           else 0)
                    await send(sock, wire.SampleRequest(credit=credit, batch_size=p.batch_size),
                               self.id)
                    self.credit_out[sock] = credit
                    self.log.info("shard_connected", member=mid, endpoint=ep)

    # -- receiving --------------------------------------------------------------

    def _take(self, b: wire.Batch, sock) -> bool:
        """Keep a served fragment for training; False when it was dropped or rejected."""
        a = b.arrays
        T = self.job.sampling.fragment_length
        why = fragment_problem(a, self.spec, T, self.algo.extras)
        if why:
            self.rejected += 1
            self.wire_stats.reject(b.sampler or b.src, wire.WireError(f"bad fragment: {why}"))
            return False
        steps = int(a["reward"].size)
        self.env_steps += steps  # dropped fragments count: the envs did step
        src = (b.sampler or b.src)[:64]
        if src in self.by_sampler or len(self.by_sampler) < 1024:
            self.by_sampler[src] = self.by_sampler.get(src, 0) + 1
        if "ep_return" in a:
            self.returns.extend(np.asarray(a["ep_return"], np.float64).tolist()[-100:])
        if self.job.environment.normalize_obs and "rms_mean" in a:
            with contextlib.suppress(KeyError, ValueError, IndexError):
                self.rms.merge(a["rms_mean"], a["rms_var"], float(a["rms_count"][0]))
        lag = self.version - b.version
        self.lags.append(lag)
        if lag > self.job.training.max_policy_lag or lag < 0:
            self.dropped += 1
            return False
        self.pending.append((b.version, a, sock))
        self.pending_steps += steps
        if self.pending_steps >= self.algo.params.batch_size:
            self.data_ready.set()
        return True

    async def _read_shard(self, sock) -> None:
        """One reader per shard socket, cancelled when the shard goes away."""
        while True:
            _, msg = await recv(sock, self.wire_stats, expect=(wire.Batch,))
            if not self.algo.on_policy:
                if msg is not None:
                    await self.batches.put((sock, msg))
                else:
                    await send(sock, wire.SampleRequest(credit=1), self.id)
                continue
            kept = msg is not None and not self.finished and self._take(msg, sock)
            if not kept:  # consumed already: ask for another
                await send(sock, wire.SampleRequest(credit=1), self.id)

    # -- training ---------------------------------------------------------------

    def _params(self, final: bool = False) -> wire.Params:
        arrays = self.algo.policy_arrays()
        if self.job.environment.normalize_obs:
            arrays.update(self.rms.to_arrays())
        return wire.Params(version=self.version, env_steps=self.env_steps, final=final,
                           arrays=arrays)

    async def publish(self, final: bool = False) -> None:
        await send(self.pub, self._params(final), self.id)
        self.published_at = time.monotonic()

    async def _train_loop(self) -> None:
        total = self.job.training.total_timesteps
        await self.publish()
        while self.env_steps < total:
            # level-triggered: a batch already pending is trained on without waiting for
            # another fragment. The learner may hold every credit it gave a shard (after a
            # reconnect, fragments of the old socket return none), so none would come.
            if self.pending_steps < self.algo.params.batch_size:
                self.log.debug("waiting", pending=self.pending_steps)
                self.data_ready.clear()
                await self.data_ready.wait()
                continue
            frags = await self._next_batch()
            if not frags:
                continue
            if not self.job.training.learn:  # drain only: measures the pipeline
                continue
            batch = concat_fragments(frags, self.algo.extras)
            learn_s = await self._update(batch)
            self.log.debug("updated", version=self.version, steps=int(batch["reward"].size),
                           learn_s=round(learn_s, 4), pending=self.pending_steps)
            await self.after_update()
            if self.job.training.update_delay_s > 0:
                await asyncio.sleep(self.job.training.update_delay_s)
            if self.version % self.job.training.sync_interval_updates == 0:
                await self.publish()
            if self.env_steps >= self.next_ckpt:
                self.next_ckpt += self.job.checkpoint.interval_steps
                await asyncio.to_thread(self._checkpoint)
        await self._finish()

    def _offpolicy_problem(self, a) -> str:
        try:
            n = a["reward"].shape[0]
            want = {"obs": (n, *self.spec.obs_shape), "next_obs": (n, *self.spec.obs_shape),
                    "reward": (n,), "discount": (n,), "weight": (n,), "index": (n,),
                    "generation": (n,), "env_steps": (1,),
                    "action": (n,) if self.spec.discrete else (n, self.spec.n_actions)}
        except (KeyError, IndexError) as e:
            return f"missing or misshapen reward: {e}"
        for k, shape in want.items():
            if k not in a or tuple(a[k].shape) != shape:
                return f"{k}: expected shape {shape}"
        for k in ("obs", "next_obs", "reward", "discount", "weight"):
            if a[k].dtype.kind != "f" or not np.isfinite(a[k]).all():
                return f"{k} is not finite floats"
        return ""

    async def _train_offpolicy(self) -> None:
        """One sampled batch, one update; priorities go back to the shard it came from."""
        total = self.job.training.total_timesteps
        await self.publish()
        while self.env_steps < total:
            sock, msg = await self.batches.get()
            self.credit_out[sock] = self.credit_out.get(sock, 1) - 1
            a = msg.arrays
            why = self._offpolicy_problem(a)
            if why:
                self.rejected += 1
                self.wire_stats.reject(msg.src, wire.WireError(f"bad batch: {why}"))
            else:
                self.shard_steps[sock] = int(a["env_steps"][0])
                if "size" in a and a["size"].shape == (1,):
                    self.shard_sizes[sock] = int(a["size"][0])
                # never backwards: a shard restarted from an older snapshot reports less
                self.env_steps = max(self.env_steps, sum(self.shard_steps.values()))
                await self._update(a)
                # the shard may have gone (and its socket closed) during the update
                if self.algo.priorities is not None and sock in self._live_shards():
                    await send(sock, wire.PriorityUpdate(arrays={
                        "index": np.asarray(a["index"]), "generation": np.asarray(a["generation"]),
                        "priority": self.algo.priorities.astype(np.float64)}), self.id)
                if self.version % self.job.training.sync_interval_updates == 0:
                    await self.publish()
                if self.env_steps >= self.next_ckpt:
                    self.next_ckpt += self.job.checkpoint.interval_steps
                    await asyncio.to_thread(self._checkpoint)
            target = self._credit_target()
            if target is not None:
                await send(target, wire.SampleRequest(credit=1), self.id)
                self.credit_out[target] = self.credit_out.get(target, 0) + 1
        await self._finish()

    def _live_shards(self) -> list:
        """The DEALER sockets of the shards connected now (a closed one is not), in
        connection order (few: a list is as quick to search as a set)."""
        return [s for _, s in self.dealers.values()]

    def _credit_target(self):
        """Which connected shard gets the next batch request: in proportion to shard
        sizes, so the learner samples the whole replay evenly; a shard left without
        credit gets one first (its size stays known)."""
        shards = self._live_shards()
        if not shards:
            return None
        if len(shards) == 1:
            return shards[0]
        for s in shards:
            if self.credit_out.get(s, 0) <= 0:
                return s
        sizes = np.array([max(1, self.shard_sizes.get(s, 1)) for s in shards], np.float64)
        return shards[int(self.rng.choice(len(shards), p=sizes / sizes.sum()))]

    async def _next_batch(self) -> list[dict]:
        """Oldest-first fragments for one update; too stale ones are dropped. Every
        fragment taken out of `pending` returns one credit to its shard, so the
        learner holds at most prefetch + one batch: backpressure reaches samplers."""
        out, steps = [], 0
        lag_max = self.job.training.max_policy_lag
        live = self._live_shards()
        while self.pending and steps < self.algo.params.batch_size:
            version, a, sock = self.pending.popleft()
            n = int(a["reward"].size)
            self.pending_steps -= n
            if sock is not None and sock in live:
                await send(sock, wire.SampleRequest(credit=1), self.id)
            if self.version - version > lag_max:
                self.dropped += 1
                continue
            out.append((version, a, None))
            steps += n
        if steps < self.algo.params.batch_size:  # not enough fresh data: put it back
            self.pending.extendleft(reversed(out))
            self.pending_steps += steps
            return []
        return [a for _, a, _ in out]

    async def _update(self, batch) -> float:
        """One update in a worker thread (heartbeats go on); returns its seconds."""
        self.algo.progress = min(1.0, self.env_steps / self.job.training.total_timesteps)
        self.algo.env_steps = self.env_steps  # schedules and demonstration decay read it
        t0 = time.monotonic()
        self.last_metrics = await asyncio.to_thread(self.algo.learn, batch)
        dt = time.monotonic() - t0
        self.learn_s += dt
        self.version += 1
        return dt

    async def after_update(self) -> None:
        """Called after each on-policy update (peers gossip and mix here)."""

    async def teardown(self) -> None:
        """Stopped before the end (SIGTERM, job shutdown): keep where training got to."""
        if not self.finished and self.algo.updates > 0:
            self._checkpoint()

    async def _finish(self) -> None:
        self.finished = True
        await asyncio.to_thread(self._checkpoint)
        self.log.info("training_finished", env_steps=self.env_steps, version=self.version,
                      updates=self.algo.updates, fragments_dropped=self.dropped)
        evaluators = [m for m in self.members.values() if m.role == "evaluator"]
        if not evaluators:
            await self.job_shutdown("training_finished")
            return
        # the evaluator runs a last evaluation of these params, then stops the job
        deadline = time.monotonic() + 120.0
        while time.monotonic() < deadline and not self.stop_event.is_set():
            await self.publish(final=True)
            await asyncio.sleep(1.0)
        await self.job_shutdown("training_finished")

    async def _republish_loop(self) -> None:
        while not self.finished:
            await asyncio.sleep(REPUBLISH_S)
            if time.monotonic() - getattr(self, "published_at", 0.0) >= REPUBLISH_S:
                await self.publish()

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            self.tasks = tg  # shard readers join it as shards come and go
            tg.create_task(self._shards_loop())
            tg.create_task(self._republish_loop())
            tg.create_task(self._train_loop() if self.algo.on_policy
                           else self._train_offpolicy())

    def status(self) -> dict[str, float]:
        return {"env_steps": self.env_steps, "version": self.version}

    def metrics(self) -> dict[str, float]:
        now = time.monotonic()
        t, steps, upd = self._rate
        dt = max(now - t, 1e-9)
        self._rate = (now, self.env_steps, self.algo.updates)
        r = self.name
        out = {f"{r}/env_steps": self.env_steps, f"{r}/updates": self.algo.updates,
               f"{r}/policy_version": self.version,
               f"{r}/fragments_dropped": self.dropped,
               f"{r}/fragments_rejected": self.rejected,
               f"{r}/env_steps_per_s": round((self.env_steps - steps) / dt, 1),
               f"{r}/updates_per_s": round((self.algo.updates - upd) / dt, 3),
               f"{r}/learn_s": round(self.learn_s, 3),
               f"{r}/shards": len(self.dealers)}
        if self.by_sampler:
            out[f"{r}/fragments_from"] = dict(self.by_sampler)
        if self.lags:
            out[f"{r}/policy_lag_mean"] = round(float(np.mean(self.lags)), 3)
        if self.returns:
            out[f"{r}/episode_return_mean"] = round(float(np.mean(self.returns)), 3)
        out.update({k: round(float(v), 6) for k, v in self.last_metrics.items()})
        return out


ROLE = LearnerRole
