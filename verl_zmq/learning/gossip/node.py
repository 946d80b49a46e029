"""A gossip peer's node: who its neighbours are, the exchanges with them, and
the mixing of what they send (moolib's peer, as one component).

Every `gossip.update_interval` local updates the node starts one exchange with
each of `gossip.neighbor_count` neighbours (chosen by `selection_strategy`):
a hello and its reply carry the parameters' SHA-256 fingerprint, the mean
recent return, the param version and env steps (and the peers each side
knows, so membership survives the registry); a params request and reply
follow only when the neighbour holds parameters this peer has not seen.
Received parameters wait in a bounded priority queue; every
`gossip.sync_interval` updates they are mixed in, theta <- (1 - a) theta +
a sum_j w_j theta_j, optimiser state kept. A peer that has barely started
adopts the best received parameters outright. A neighbour silent for the
liveness timeout, or that the registry drops, is no longer chosen. An exchange
in flight owns its socket (dropping a busy neighbour leaves it to the exchange).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import numpy as np
import zmq
import zmq.asyncio

from ... import wire
from ...batch import job_layout
from ...comm.messaging import WireStats, recv, request, send
from ...comm.transport import Transport
from ...config import Job
from ...config.members import index_of
from ..trainer import Trainer
from . import compress, grad_codec
from . import core as gossip
from .async_mix import AsyncGradMixer
from .experience import ExperienceGossip
from .grad_mix import GradMixer
from .neighbours import Neighbours
from .round_mix import RoundMixer

M = TypeVar("M", bound=wire.Message)


class GossipNode:
    """The gossip state and protocol of one peer; the peer role owns one."""

    def __init__(self, job: Job, member_id: str, index: int, trainer: Trainer,
                 transport: Transport, log: Any, stats: WireStats,
                 spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]],
                 publish: Callable[[], Awaitable[None]]):
        G = job.gossip
        self.job, self.id, self.trainer = job, member_id, trainer
        self.transport, self.log, self.wire_stats = transport, log, stats
        self.spawn, self.publish = spawn, publish
        self.gossip_sock, self.endpoint = transport.bind(zmq.ROUTER, "gossip", hwm=100)
        self.nb = Neighbours(member_id, transport, log, self._dropped)
        # it answers pulls and hellos from its event loop while an update runs: the
        # trainer keeps a copy of the arrays from before each update for them
        trainer.read_during_updates = True
        self.info: dict[str, dict[str, float]] = {}  # from hellos: reward, version, env_steps
        self.queue = gossip.ParamQueue(G.max_queue_size, G.priority_fn)
        self.recv_fp: dict[str, str] = {}  # fingerprint of what each peer last sent us
        self.recon: dict[str, dict[str, np.ndarray]] = {}  # ... and what we rebuilt of it
        self.sent_base: dict[str, dict[str, np.ndarray]] = {}  # what each can rebuild of ours
        self.grng = np.random.default_rng(job.experiment.seed * 7919 + index)
        self.round = 0
        self.last_round = self.last_sync = 0
        # per neighbour, how far its params were ahead of ours at our last mix
        self.ahead: dict[str, int] = {}
        self.stats = dict.fromkeys(("exchanges", "pulls", "pulls_skipped", "mixes", "adopted",
                                    "refused", "timeouts", "stale_dropped"), 0)
        self.param_bytes = 0  # of the params sent in answer to pulls
        self._fp_cache: tuple[tuple[int, float], str] = ((-1, 0.0), "")
        self.bootstrapped = asyncio.Event()
        deadline = G.round_deadline_s or self.job.launch.liveness_timeout_s
        self.mixer = RoundMixer(self, deadline) if G.mixing in ("exact", "gradients") else None
        grads = G.mixing == "gradients"
        self.grads = GradMixer(self, deadline, job.launch.peers) if grads else None
        share = G.share if G.mixing == "async" else ""
        self.asyncg = AsyncGradMixer(self, self._grad_neighbours, np.random.default_rng(
            [job.experiment.seed, index, 0xA5]
        )) if share == "gradients" else None
        self.exp = ExperienceGossip(self, self._grad_neighbours, job_layout(
            job, trainer.spec)) if share == "experience" else None
        if self.exp is not None:
            trainer.widen = self.exp.widen
        # parameters travel as the compression says; 1-bit signs are for gradients
        self.param_compression = G.compression if G.compression in compress.SCHEMES \
            else "fp16"

    # -- who is out there (neighbours.py) --------------------------------------------------

    @property
    def peers(self) -> dict[str, wire.Member]:
        return self.nb.peers

    def on_membership(self, members: dict[str, wire.Member]) -> None:
        self.nb.on_membership(members)

    def dealer(self, pid: str) -> zmq.asyncio.Socket:
        return self.nb.dealer(pid)

    def _dropped(self, pid: str) -> None:
        if self.grads is not None:
            self.grads.arrived.set()  # a round waiting for it stops waiting now
        self.info.pop(pid, None)

    # -- what this peer holds -----------------------------------------------------------

    def own_arrays(self) -> dict[str, np.ndarray]:
        """What travels: the policy's arrays, and the observation statistics they were
        trained with (mixed alike, so a mixed policy sees what it expects)."""
        return {k: (v.astype(np.float32) if k.startswith("obs_rms/") else v)
                for k, v in self.trainer.arrays().items()}

    def fingerprint(self) -> str:
        # params change only at an update or a mix, both of which bump the version; the
        # observation statistics that travel with them change as fragments arrive
        t = self.trainer
        key = (t.state.version, t.rms.count if self.job.environment.normalize_obs else 0.0)
        if self._fp_cache[0] != key:
            self._fp_cache = (key, gossip.fingerprint(self.own_arrays()))
        return self._fp_cache[1]

    def reward(self) -> float:
        return self.trainer.mean_return()

    def _hello(self, reply: bool) -> wire.GossipHello:
        return wire.GossipHello(reply=reply, fingerprint=self.fingerprint(),
                                reward=self.reward(), version=self.trainer.state.version,
                                env_steps=self.trainer.state.env_steps,
                                members=self.nb.listed())

    # -- rounds -------------------------------------------------------------------------

    def _grad_neighbours(self, step: int) -> list[str]:
        """Where one gradient push goes: `neighbor_count` neighbours, chosen by the
        job's selection strategy for this step."""
        if not self.peers:
            return []
        return self._neighbours(step)

    def _neighbours(self, at: int | None = None) -> list[str]:
        """This round's (or step `at`'s) neighbours, by the job's selection strategy."""
        G = self.job.gossip
        at = self.round if at is None else at
        ids = sorted(self.peers) + [self.id]
        if G.selection_strategy == "topology":
            # a fixed graph over peer numbers; dead or unknown numbers are holes
            n = max(self.job.launch.peers, max(index_of(i) for i in ids) + 1)
            by_index = {index_of(i): i for i in ids}
            alive = np.array([i in by_index for i in range(n)])
            row = gossip.select_round("topology", n, G.neighbor_count, at, self.grng,
                                      topology=G.topology, alive=alive)[index_of(self.id)]
            return [by_index[int(j)] for j in row if j >= 0 and by_index[int(j)] != self.id]
        rewards = np.array([self.info.get(i, {}).get("reward", 0.0) for i in ids[:-1]]
                           + [self.reward()])
        row = gossip.select_round(G.selection_strategy, len(ids), G.neighbor_count,
                                  at, self.grng, rewards=rewards,
                                  temperature=G.temperature)[len(ids) - 1]
        return [ids[int(j)] for j in row]

    def _start_round(self) -> None:
        chosen = [n for n in self._neighbours() if n not in self.nb.busy]
        self.round += 1
        self.stats["exchanges"] += len(chosen)
        self.log.info("gossip_round", round=self.round, exchanges=len(chosen),
                      neighbours=chosen, peers=len(self.peers),
                      version=self.trainer.state.version)
        for n in chosen:
            self.nb.busy.add(n)
            self.spawn(self._exchange(n))

    async def _ask(self, sock: zmq.asyncio.Socket, msg: wire.Message,
                   kind: type[M]) -> M | None:
        """One request to a neighbour: its reply, or None within liveness."""
        return await request(sock, msg, self.id, self.wire_stats, kind,
                             self.job.launch.liveness_timeout_s)

    async def _exchange(self, pid: str) -> None:
        try:
            if pid in self.peers:
                await self._exchange_once(pid, self.dealer(pid))
        finally:
            self.nb.release(pid)  # sockets dropped or replaced meanwhile close now

    def _no_reply(self, pid: str, sock: zmq.asyncio.Socket) -> None:
        self.stats["timeouts"] += 1
        self.nb.silent(pid, sock)

    async def _exchange_once(self, pid: str, sock: zmq.asyncio.Socket) -> None:
        hello = await self._ask(sock, self._hello(False), wire.GossipHello)
        if hello is None:
            self._no_reply(pid, sock)
            return
        self._heard(pid, hello)
        self.nb.answered(pid)
        if hello.fingerprint in (self.fingerprint(), self.recv_fp.get(pid)):
            self.stats["pulls_skipped"] += 1
            self.log.info("gossip_pull_skipped", member=pid, round=self.round,
                          version=hello.version)
            return
        base = self.recon.get(pid)
        req = wire.GossipParams(request=True,
                                fingerprint=gossip.fingerprint(base) if base else "")
        got = await self._ask(sock, req, wire.GossipParams)
        if got is None:
            self._no_reply(pid, sock)
            return
        self._take_params(pid, got, base)

    def _heard(self, pid: str, hello: wire.GossipHello) -> None:
        self.info[pid] = {"reward": float(hello.reward), "version": hello.version,
                          "env_steps": hello.env_steps}
        for m in hello.members:
            self.nb.learn(m, "gossip")

    def _take_params(self, pid: str, msg: wire.GossipParams,
                     base: dict[str, np.ndarray] | None) -> None:
        own = self.own_arrays()
        try:
            arrays = compress.decode(dict(msg.arrays), msg.compression, base, own)
            why = gossip.check_like(arrays, own)
        except (ValueError, KeyError, TypeError) as e:
            why = str(e)
        if why:
            self.stats["refused"] += 1
            self.recon.pop(pid, None)  # start over with full params next time
            self.wire_stats.reject(pid, wire.WireError(f"gossip params refused: {why}"))
            return
        self.stats["pulls"] += 1
        self.recv_fp[pid] = msg.fingerprint
        self.recon[pid] = arrays
        self.queue.put(pid, arrays, float(msg.reward), msg.version, self.trainer.algo.updates)
        self.log.info("gossip_params_received", member=pid, version=msg.version,
                      reward=round(float(msg.reward), 3), compression=msg.compression,
                      queued=len(self.queue))

    # -- answering neighbours -----------------------------------------------------------

    async def serve(self) -> None:
        """Answer neighbours' hellos and params requests, for the role's whole life."""
        G = self.job.gossip
        while True:
            prefix, msg = await recv(self.gossip_sock, self.wire_stats, n_prefix=1,
                                     expect=(wire.GossipHello, wire.GossipParams,
                                             wire.GossipGrads, wire.GossipBatch))
            if msg is None:
                continue
            if isinstance(msg, wire.GossipGrads):  # a gradient push: no reply
                if self.grads is not None:
                    self.grads.receive(msg.src, msg)
                elif self.asyncg is not None:
                    self.asyncg.receive(msg.src, msg)
                continue
            if isinstance(msg, wire.GossipBatch):  # a neighbour's batch: no reply
                if self.exp is not None:
                    self.exp.receive(msg.src, msg)
                continue
            reply: wire.Message
            if isinstance(msg, wire.GossipHello):
                self._heard(msg.src, msg)
                reply = self._hello(True)
            elif not msg.request:  # a round's push (exact mixing): no reply
                if self.mixer is not None:
                    self.mixer.receive(msg.src, msg)
                continue
            else:
                own = self.own_arrays()
                base = self.sent_base.get(msg.src)
                if base is not None and gossip.fingerprint(base) != msg.fingerprint:
                    base = None  # the requester lost our base: full params
                scheme = self.param_compression
                arrays, recon = compress.encode(own, scheme, base, G.topk_fraction)
                used = scheme if (scheme not in compress.DELTA or base is not None) else "fp16"
                if scheme in compress.DELTA:
                    self.sent_base[msg.src] = recon
                self.param_bytes += grad_codec.nbytes(arrays)
                reply = wire.GossipParams(fingerprint=self.fingerprint(),
                                          reward=self.reward(),
                                          version=self.trainer.state.version,
                                          compression=used, arrays=arrays)
            with contextlib.suppress(zmq.ZMQError):  # the asker is gone: nothing to do
                await send(self.gossip_sock, reply, self.id, prefix=[prefix[0]])

    # -- mixing -------------------------------------------------------------------------

    def _mix(self) -> None:
        G = self.job.gossip
        entries = self.queue.drain()
        fresh = [e for e in entries if self.trainer.algo.updates - e.received_at_update
                 <= G.staleness_updates]
        self.stats["stale_dropped"] += len(entries) - len(fresh)
        if not fresh:
            return
        own = self.own_arrays()
        newest = max(fresh, key=lambda e: e.version)
        own_v = self.trainer.state.version
        # fell behind since the last mix with it: a stall or a restart, not a steady
        # difference of pace (peers' versions drift apart at their own speeds)
        fell = newest.version - own_v - self.ahead.get(newest.src, newest.version - own_v)
        for e in fresh:
            self.ahead[e.src] = e.version - own_v
        if self.trainer.algo.updates == 0 or fell > G.staleness_updates:
            # nothing learnt yet (a late joiner), or far behind its neighbours (a stall):
            # take the freshest neighbour's params outright, not a mix with stale ones
            new, how = (fresh[0] if self.trainer.algo.updates == 0 else newest).arrays, "adopted"
            weights, rate = np.ones(1), 1.0
        else:
            weights = gossip.mixing_weights(G.mixing, [e.reward for e in fresh], G.temperature)
            new = gossip.mix_params(own, [e.arrays for e in fresh], weights, G.mix_rate)
            how, rate = "mixed", G.mix_rate
        self.trainer.load_arrays(new)  # new params: a new version (and fingerprint)
        self.stats["adopted" if how == "adopted" else "mixes"] += 1
        self.log.info("gossip_mix_applied", how=how, entries=len(fresh),
                      sources=[e.src for e in fresh], weights=[round(float(w), 4)
                                                               for w in weights],
                      rate=rate, version=self.trainer.state.version,
                      updates=self.trainer.algo.updates)

    async def after_update(self) -> None:
        """Every `update_interval` updates a round; every `sync_interval` a mix."""
        G = self.job.gossip
        u = self.trainer.algo.updates
        self.nb.retry_quiet()  # silent peers the registry lists, once their wait is over
        if self.grads is not None:
            # gradient rounds keep the peers' update numbers in step (theirs may differ:
            # a restart, an update alone): parameter rounds follow that number, so
            # every peer runs one at the same update and none waits for another's
            if (self.grads.update + 1) % G.sync_interval == 0 and self.mixer is not None:
                await self.mixer.run_round()
            return
        if self.mixer is not None:  # exact mixing: rounds replace pulls and the queue
            if u - self.last_sync >= G.sync_interval:
                self.last_sync = u
                await self.mixer.run_round()
            return
        if u - self.last_round >= G.update_interval and self.peers:
            self.last_round = u
            self._start_round()
        if u - self.last_sync >= G.sync_interval and len(self.queue):
            self.last_sync = u
            self._mix()
            await self.publish()

    async def bootstrap(self) -> None:
        """Before any local update: one round, so that a late joiner adopts the
        others' parameters instead of training from scratch. (At a job's start every
        peer holds the same initial parameters: those pulls are skipped.)"""
        try:
            if self.mixer is not None and self.grads is None:
                return  # exact mixing: the first round averages a late joiner in
            # wait (a little) to know enough peers for a full round; gradient rounds
            # want every peer from the first update, or the peers part ways there
            want = max(1, self.job.launch.peers - 1)
            if self.grads is None:
                want = min(self.job.gossip.neighbor_count, want)
            deadline = time.monotonic() + 2 * self.job.launch.liveness_timeout_s
            while len(self.peers) < want and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            if self.grads is not None:
                return
            if not self.peers:
                return
            self._start_round()
            deadline = time.monotonic() + 1.5 * self.job.launch.liveness_timeout_s
            while self.nb.busy and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            if len(self.queue):
                self._mix()
                await self.publish()
        finally:
            self.bootstrapped.set()

    def others_done(self, total: int) -> bool:
        """Every peer this one hears of has trained `total` env steps."""
        return all(self.info.get(p, {}).get("env_steps", 0) >= total for p in self.peers)

    def metrics(self) -> dict[str, float]:
        out: dict[str, float] = {f"gossip/{k}": v for k, v in self.stats.items()}
        out.update({"gossip/peers": len(self.peers), "gossip/queue": len(self.queue),
                    "gossip/round": self.round, "gossip/param_bytes_sent": self.param_bytes})
        if self.mixer is not None:
            out.update(self.mixer.metrics())
        if self.grads is not None:
            out.update(self.grads.metrics())
        if self.asyncg is not None:
            out.update(self.asyncg.metrics())
        if self.exp is not None:
            out.update(self.exp.metrics())
        return out
