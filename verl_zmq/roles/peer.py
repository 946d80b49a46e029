"""DAPO peer: a learner of its own group (its own samplers and FIFO shard) that
shares what it learns with a few neighbours by gossip, with no centre.

Every `gossip.update_interval` local updates a peer starts one exchange with
each of `gossip.neighbor_count` neighbours (chosen by `selection_strategy`):
a hello and its reply carry the parameters' SHA-256 fingerprint, the mean
recent return, the param version and env steps (and the peers each side
knows, so membership survives the registry); a params request and reply
follow only when the neighbour holds parameters this peer has not seen.
Received parameters wait in a bounded priority queue; every
`gossip.sync_interval` updates they are mixed in, theta <- (1 - a) theta +
a sum_j w_j theta_j, optimiser state kept. A peer that has barely started
adopts the best received parameters outright. A neighbour that does not
answer within heartbeat x liveness, or that the registry drops, is no longer
chosen.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import numpy as np
import torch
import zmq

from .. import compress, gossip, wire
from .base import index_of, recv, send
from .learner import LearnerRole

FORGET_DEAD_S = 30.0  # a peer found dead is not re-learned from gossip for this long


class PeerRole(LearnerRole):
    """A decentralised learner: local PPO/DAPO updates plus gossip with neighbours."""

    name = "peer"

    async def setup(self) -> None:
        await super().setup()
        G = self.job.gossip
        self.gossip_sock, ep = self.ctx.transport.bind(zmq.ROUTER, "gossip", hwm=100)
        self.endpoints["gossip"] = ep
        self.peers: dict[str, wire.Member] = {}
        self.dead: dict[str, float] = {}
        self.out: dict[str, tuple[str, object]] = {}  # neighbour -> (endpoint, DEALER)
        self.busy: set[str] = set()
        self.orphans: dict[str, list] = {}  # sockets to close once their exchange ends
        self.info: dict[str, dict] = {}  # from hellos: reward, version, env_steps
        self.queue = gossip.ParamQueue(G.max_queue_size, G.priority_fn)
        self.recv_fp: dict[str, str] = {}  # fingerprint of what each peer last sent us
        self.recon: dict[str, dict[str, np.ndarray]] = {}  # ... and what we rebuilt of it
        self.sent_base: dict[str, dict[str, np.ndarray]] = {}  # what each can rebuild of ours
        self.grng = np.random.default_rng(self.job.experiment.seed * 7919 + self.ctx.index)
        # same init everywhere (a common starting point), distinct randomness after it
        torch.manual_seed(self.job.experiment.seed * 1000 + self.ctx.index)
        self.round = 0
        self.last_round = self.last_sync = 0
        self.stats = dict.fromkeys(("exchanges", "pulls", "pulls_skipped", "mixes", "adopted",
                                    "refused", "timeouts", "stale_dropped",
                                    "uninformative_dropped"), 0)
        self._fp_cache: tuple[tuple[int, float], str] = ((-1, 0.0), "")
        self._registry_peers: dict[str, wire.Member] = {}
        self.bootstrapped = asyncio.Event()

    def checkpoint_dir(self) -> Path:
        # peers of one job may share a host and a run folder: one folder each
        return Path(self.ctx.run_dir) / "checkpoints" / self.id

    # -- who is out there ---------------------------------------------------------------

    def on_membership(self, members) -> None:
        super().on_membership(members)
        now = {m.id: m for m in members.values() if m.role == "peer" and m.id != self.id}
        for pid in list(self.peers):
            if pid in self._registry_peers and pid not in now:
                self._drop(pid, "registry")  # missed heartbeats, or left
        self._registry_peers = now
        for m in now.values():
            self._learn(m, "registry")

    def _learn(self, m: wire.Member, how: str) -> None:
        if m.id == self.id or m.role != "peer" or not m.endpoints.get("gossip"):
            return
        if how == "gossip" and self.dead.get(m.id, 0.0) > time.monotonic():
            return
        old = self.peers.get(m.id)
        if old is None or old.endpoints.get("gossip") != m.endpoints.get("gossip"):
            if old is not None:
                self._close(m.id)
            self.peers[m.id] = m
            self.dead.pop(m.id, None)
            self.log.info("peer_learned", member=m.id, via=how, peers=len(self.peers))

    def _drop(self, pid: str, why: str) -> None:
        if self.peers.pop(pid, None) is None:
            return
        self._close(pid)
        self.dead[pid] = time.monotonic() + FORGET_DEAD_S
        self.info.pop(pid, None)
        self.log.info("neighbour_dropped", member=pid, reason=why, peers=len(self.peers))

    def _close(self, pid: str) -> None:
        ep_sock = self.out.pop(pid, None)
        # an exchange in flight is waiting on this socket: it closes it when done
        # (closing it under a pending recv fails that recv, and with it the role)
        if ep_sock is None:
            return
        if pid in self.busy:
            self.orphans.setdefault(pid, []).append(ep_sock[1])
        else:
            self.ctx.transport.close_socket(ep_sock[1])

    def _dealer(self, pid: str):
        ep = self.peers[pid].endpoints["gossip"]
        cur = self.out.get(pid)
        if cur is None or cur[0] != ep:
            if cur is not None:
                self.ctx.transport.close_socket(cur[1])
            cur = (ep, self.ctx.transport.connect(zmq.DEALER, ep, hwm=10))
            self.out[pid] = cur
        return cur[1]

    def _members(self) -> list[wire.Member]:
        return list(self.peers.values())[:64]

    # -- what this peer holds -----------------------------------------------------------

    def _own(self) -> dict[str, np.ndarray]:
        """What travels: the policy's arrays, and the observation statistics they were
        trained with (mixed alike, so a mixed policy sees what it expects)."""
        out = self.algo.policy_arrays()
        if self.job.environment.normalize_obs:
            out.update({k: v.astype(np.float32) for k, v in self.rms.to_arrays().items()})
        return out

    def _fingerprint(self) -> str:
        # params change only at an update or a mix, both of which bump the version; the
        # observation statistics that travel with them change as fragments arrive
        key = (self.version, self.rms.count if self.job.environment.normalize_obs else 0.0)
        if self._fp_cache[0] != key:
            self._fp_cache = (key, gossip.fingerprint(self._own()))
        return self._fp_cache[1]

    def _reward(self) -> float:
        return float(np.mean(self.returns)) if self.returns else 0.0

    def _hello(self, reply: bool) -> wire.GossipHello:
        return wire.GossipHello(reply=reply, fingerprint=self._fingerprint(),
                                reward=self._reward(), version=self.version,
                                env_steps=self.env_steps, members=self._members())

    # -- rounds -------------------------------------------------------------------------

    def _neighbours(self) -> list[str]:
        """This round's neighbours, by the job's selection strategy."""
        G = self.job.gossip
        ids = sorted(self.peers) + [self.id]
        if G.selection_strategy == "topology":
            # a fixed graph over peer numbers; dead or unknown numbers are holes
            n = max(self.job.launch.peers, max(index_of(i) for i in ids) + 1)
            by_index = {index_of(i): i for i in ids}
            alive = np.array([i in by_index for i in range(n)])
            row = gossip.select_round("topology", n, G.neighbor_count, self.round, self.grng,
                                      topology=G.topology, alive=alive)[index_of(self.id)]
            return [by_index[int(j)] for j in row if j >= 0 and by_index[int(j)] != self.id]
        rewards = np.array([self.info.get(i, {}).get("reward", 0.0) for i in ids[:-1]]
                           + [self._reward()])
        row = gossip.select_round(G.selection_strategy, len(ids), G.neighbor_count,
                                  self.round, self.grng, rewards=rewards,
                                  temperature=G.temperature)[len(ids) - 1]
        return [ids[int(j)] for j in row]

    def _start_round(self) -> None:
        chosen = [n for n in self._neighbours() if n not in self.busy]
        self.round += 1
        self.stats["exchanges"] += len(chosen)
        self.log.info("gossip_round", round=self.round, exchanges=len(chosen),
                      neighbours=chosen, peers=len(self.peers), version=self.version)
        for n in chosen:
            self.busy.add(n)
            self.tasks.create_task(self._exchange(n))

    def _timeout(self) -> float:
        L = self.job.launch
        return L.heartbeat_interval_s * L.heartbeat_liveness

    async def _ask(self, sock, msg: wire.Message, kind: type):
        """Send one request to a neighbour and wait for its reply, or None on timeout."""
        await send(sock, msg, self.id)
        try:
            async with asyncio.timeout(self._timeout()):
                while True:
                    _, reply = await recv(sock, self.wire_stats, expect=(kind,))
                    if reply is not None:
                        return reply
        except TimeoutError:
            return None

    async def _exchange(self, pid: str) -> None:
        try:
            if pid in self.peers:
                await self._exchange_once(pid, self._dealer(pid))
        finally:
            self.busy.discard(pid)
            for orphan in self.orphans.pop(pid, []):  # dropped or replaced meanwhile
                self.ctx.transport.close_socket(orphan)

    def _no_reply(self, pid: str, sock) -> None:
        self.stats["timeouts"] += 1
        cur = self.out.get(pid)
        if cur is not None and cur[1] is sock:  # not already dropped or replaced
            self._drop(pid, "no_reply")

    async def _exchange_once(self, pid: str, sock) -> None:
        hello = await self._ask(sock, self._hello(False), wire.GossipHello)
        if hello is None:
            self._no_reply(pid, sock)
            return
        self._heard(pid, hello)
        if hello.fingerprint in (self._fingerprint(), self.recv_fp.get(pid)):
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
            self._learn(m, "gossip")

    def _take_params(self, pid: str, msg: wire.GossipParams, base) -> None:
        own = self._own()
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
        self.queue.put(pid, arrays, float(msg.reward), msg.version, self.algo.updates)
        self.log.info("gossip_params_received", member=pid, version=msg.version,
                      reward=round(float(msg.reward), 3), compression=msg.compression,
                      queued=len(self.queue))

    # -- answering neighbours -----------------------------------------------------------

    async def _serve_gossip(self) -> None:
        G = self.job.gossip
        while True:
            prefix, msg = await recv(self.gossip_sock, self.wire_stats, n_prefix=1,
                                     expect=(wire.GossipHello, wire.GossipParams))
            if msg is None:
                continue
            if isinstance(msg, wire.GossipHello):
                self._heard(msg.src, msg)
                reply = self._hello(True)
            else:
                own = self._own()
                base = self.sent_base.get(msg.src)
                if base is not None and gossip.fingerprint(base) != msg.fingerprint:
                    base = None  # the requester lost our base: full params
                arrays, recon = compress.encode(own, G.compression, base, self.grng,
                                                G.topk_fraction)
                used = G.compression if (G.compression not in compress.DELTA
                                         or base is not None) else "none"
                if G.compression in compress.DELTA:
                    self.sent_base[msg.src] = recon
                reply = wire.GossipParams(fingerprint=self._fingerprint(),
                                          reward=self._reward(), version=self.version,
                                          compression=used, arrays=arrays)
            with contextlib.suppress(zmq.ZMQError):  # the asker is gone: nothing to do
                await send(self.gossip_sock, reply, self.id, prefix=[prefix[0]])

    # -- mixing -------------------------------------------------------------------------

    def _mix(self) -> None:
        G = self.job.gossip
        entries = self.queue.drain()
        fresh = [e for e in entries if self.algo.updates - e.received_at_update
                 <= G.staleness_updates]
        self.stats["stale_dropped"] += len(entries) - len(fresh)
        if not fresh:
            return
        own = self._own()
        if self.algo.updates == 0:
            # nothing learnt yet (a late joiner): take the best neighbour's params outright
            new, how = fresh[0].arrays, "adopted"
            weights, rate = np.ones(1), 1.0
        else:
            weights = gossip.mixing_weights(G.mixing, [e.reward for e in fresh], G.temperature)
            new = gossip.mix_params(own, [e.arrays for e in fresh], weights, G.mix_rate)
            how, rate = "mixed", G.mix_rate
        self.algo.load_policy_arrays(new)
        if self.job.environment.normalize_obs:
            self.rms.load_arrays(new)
        self.version += 1  # new params: a new version (and fingerprint)
        self.stats["adopted" if how == "adopted" else "mixes"] += 1
        self.log.info("gossip_mix_applied", how=how, entries=len(fresh),
                      sources=[e.src for e in fresh], weights=[round(float(w), 4)
                                                               for w in weights],
                      rate=rate, version=self.version, updates=self.algo.updates)

    async def after_update(self) -> None:
        G = self.job.gossip
        u = self.algo.updates
        if u - self.last_round >= G.update_interval and self.peers:
            self.last_round = u
            self._start_round()
        if u - self.last_sync >= G.sync_interval and len(self.queue):
            self.last_sync = u
            self._mix()
            await self.publish()

    async def _bootstrap(self) -> None:
        """Before any local update: one round, so that a late joiner adopts the
        others' parameters instead of training from scratch. (At a job's start every
        peer holds the same initial parameters: those pulls are skipped.)"""
        try:
            # wait (a little) to know enough peers for a full round
            want = min(self.job.gossip.neighbor_count, max(1, self.job.launch.peers - 1))
            deadline = time.monotonic() + 2 * self._timeout()
            while len(self.peers) < want and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            if not self.peers:
                return
            self._start_round()
            deadline = time.monotonic() + 1.5 * self._timeout()
            while self.busy and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            if len(self.queue):
                self._mix()
                await self.publish()
        finally:
            self.bootstrapped.set()

    async def _train_loop(self) -> None:
        await self.bootstrapped.wait()
        await super()._train_loop()

    # -- dynamic sampling -----------------------------------------------------------------

    async def _next_batch(self) -> list[dict]:
        """With `dynamic_sampling`: fragments with no learning signal (every advantage
        within the tolerance of zero) are dropped and the batch is refilled from the
        queue, drawing at most `max_fill_batches` batches in all."""
        frags = await super()._next_batch()
        p = self.algo.params
        if not frags or not getattr(p, "dynamic_sampling", False):
            return frags
        kept = [f for f in frags if self.algo.informative(f)]
        drawn, draws = len(frags), 1
        while sum(int(f["reward"].size) for f in kept) < p.batch_size \
                and draws < p.max_fill_batches:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._timeout()):
                    while self.pending_steps < p.batch_size:
                        self.data_ready.clear()
                        await self.data_ready.wait()
            more = await super()._next_batch()
            if not more:
                break
            draws += 1
            drawn += len(more)
            kept += [f for f in more if self.algo.informative(f)]
        self.stats["uninformative_dropped"] += drawn - len(kept)
        return kept

    # -- lifecycle ----------------------------------------------------------------------

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            self.tasks = tg
            tg.create_task(self._serve_gossip())
            tg.create_task(self._shards_loop())
            tg.create_task(self._republish_loop())
            tg.create_task(self._bootstrap())
            tg.create_task(self._train_loop())

    async def _finish(self) -> None:
        """Done training: keep answering gossip and publishing final params; the
        evaluator ends the job when every peer is done (or, without one, the last
        peer to know that every peer it hears of is done)."""
        self.finished = True
        await asyncio.to_thread(self._checkpoint)
        self.log.info("training_finished", env_steps=self.env_steps, version=self.version,
                      updates=self.algo.updates, fragments_dropped=self.dropped, **self.stats)
        total = self.job.training.total_timesteps
        while not self.stop_event.is_set():
            await self.publish(final=True)
            evaluators = [m for m in self.members.values() if m.role == "evaluator"]
            others_done = all(self.info.get(p, {}).get("env_steps", 0) >= total
                              for p in self.peers)
            if not evaluators and others_done:
                await self.job_shutdown("training_finished")
                return
            await asyncio.sleep(1.0)

    def metrics(self) -> dict[str, float]:
        out = super().metrics()
        out.update({f"gossip/{k}": v for k, v in self.stats.items()})
        out["gossip/peers"] = len(self.peers)
        out["gossip/queue"] = len(self.queue)
        out["gossip/round"] = self.round
        return out


ROLE = PeerRole
