"""The sampler's stepping code, with no I/O: a `Collector` steps a vector env
with a local policy copy (an `Actor`) and cuts fixed-length columnar fragments,
written in place into the buffers they are sent in (`batch.Layout.fields`)."""

from __future__ import annotations

import numpy as np

from .. import wire
from ..batch import FIRST, STATE, Layout, bootstrap
from ..envs.infos import at_episode_ends
from ..envs.spaces import split
from ..normalize import obs_norm


def swap_params(c) -> dict | None:
    """A collector's pending params (`c.pending`: version, arrays) into its policy
    copy when they are new: version and swap counted, the arrays returned; None
    when nothing new came or they did not fit (`rejected_params` counted)."""
    pending, c.pending = c.pending, None
    if pending is None or pending[0] == c.version:
        return None
    version, arrays = pending
    try:
        c.algo.load_policy_arrays(arrays)
    except ValueError:
        c.rejected_params += 1
        return None
    c.version = version
    c.swaps += 1
    return arrays


class Collector:
    """Steps the vector env and cuts fixed-length columnar fragments (no I/O)."""

    def __init__(self, job, algo, venv, seeds: list[int]):
        self.job = job
        self.algo = algo
        self.venv = venv
        self.T = job.sampling.fragment_length
        self.E = venv.num_envs
        self.spec = algo.spec
        self.state_size = int(getattr(algo, "state_size", 0))
        # the fragment's columns
        self.layout = Layout(algo.spec, self.T, algo.extras, self.state_size)
        self.obs_columns = self.layout.obs_columns
        self.norm = job.environment.normalize_obs
        self.rms = obs_norm(algo.spec)
        space = getattr(venv, "single_observation_space", None)
        pixels = space is not None and space.dtype == np.uint8 and not self.norm
        self.obs_dtype = np.uint8 if pixels else np.float32
        raw, _ = venv.reset(seed=seeds if len(seeds) > 1 else seeds[0])
        self.raw_obs = self._raw(raw)
        # a recurrent policy's state per env, and which envs start an episode next
        self.state = np.zeros((self.E, self.state_size), np.float32)
        self.first = np.ones(self.E, bool)
        self.cached_state: np.ndarray | None = None  # the state the cached action took
        self.prev_done = np.zeros(self.E, bool)
        self.ep_ret = np.zeros(self.E, np.float64)
        self.ep_len = np.zeros(self.E, np.int64)
        self.version = 0
        self.pending: tuple[int, dict] | None = None
        self.cached: tuple[np.ndarray, dict, int] | None = None
        self.steps = 0
        self.job_steps = 0  # the job's env steps as this sampler estimates them (collect)
        self.swaps = 0
        self.rejected_params = 0
        self.info_keys = tuple(job.logging.info_keys)
        self.infos: dict[str, list[float]] = {}  # episode-end info values, taken by `infos_taken`
        self._arena: tuple[tuple, wire.Arena] | None = None

    def _raw(self, raw):
        """An observation as the env gave it: the array (plain), or {column: array}."""
        return split(raw, self.spec.leaves) if self.spec.structured else raw

    def _obs(self, raw):
        """What the policy sees and the fragment holds: normalised floats, float32, or
        uint8 images as they are (they become float on the network's device); per
        leaf for a structured observation."""
        if self.norm:
            return self.rms.normalize(raw, self.job.environment.clip_obs)
        if self.spec.structured:
            return raw
        return raw.astype(self.obs_dtype, copy=False)

    def _put(self, c: dict, obs, t: int | None) -> None:
        """Write an observation at step t of its columns (None: the bootstrap ones)."""
        if not self.spec.structured:
            obs = {"obs": obs}
        for k in self.obs_columns:
            if t is None:
                c[bootstrap(k)][...] = obs[k]
            else:
                c[k][t] = obs[k]

    def swap(self) -> None:
        """Load params that arrived, if they are new (or the first)."""
        arrays = swap_params(self)
        if arrays is None:
            return
        if self.norm:
            self.rms.load_arrays(arrays)
        self.cached = None  # act again with the new params

    def _act(self, obs):
        """(action, extras, version, the state it acted from): the cached first action
        of a fragment (acted at the last one's bootstrap), else a fresh one."""
        if self.cached is not None:
            a, ex, v = self.cached
            self.cached = None
            return a, ex, v, self.cached_state
        a, ex = self._policy(obs)
        return a, ex, self.version, self.state

    def _policy(self, obs):
        if not self.state_size:
            return self.algo.act(obs, env_steps=self.job_steps)
        return self.algo.act(obs, env_steps=self.job_steps, state=(self.state, self.first))

    def _step(self, a: np.ndarray, finished_ret: list, finished_len: list):
        """One vector step: (valid, reward, terminated, truncated) as recorded, in
        NEXT_STEP layout (the step after a done step only resets: invalid)."""
        E = self.E
        raw, r, te, tr, info = self.venv.step(self.algo.env_action(a))
        # the envs this step reset start an episode at the next observation
        self.first = self.prev_done.copy()
        ok = ~self.prev_done
        if "void" in info:  # steps the env did not take (a sequence waiting for its group)
            ok &= ~np.asarray(info["void"], bool)
        if "dropped" in info:  # the envs failed and were made anew: drop their episodes
            ok = np.zeros(E, bool)
            self.first = np.ones(E, bool)
            te, tr = np.zeros(E, bool), np.zeros(E, bool)
            self.ep_ret[:] = 0.0
            self.ep_len[:] = 0
        self.ep_ret += np.where(ok, r, 0.0)
        self.ep_len += ok
        ended = np.flatnonzero((te | tr) & ok)
        at_episode_ends(info, ended, self.info_keys, self.infos)
        for i in ended:
            finished_ret.append(self.ep_ret[i])
            finished_len.append(self.ep_len[i])
            self.ep_ret[i] = 0.0
            self.ep_len[i] = 0
        self.prev_done = te | tr
        self.raw_obs = self._raw(raw)
        self.steps += 1
        return ok, np.where(ok, r, 0.0), te & ok, tr & ok

    def infos_taken(self) -> dict[str, list[float]]:
        """The `logging.info_keys` values of the episodes ended since the last call."""
        out, self.infos = self.infos, {}
        return out

    def _columns(self, a: np.ndarray, ex: dict) -> wire.Arena:
        """The fragment's fixed columns, laid out as they travel (one per action
        shape and dtype: the same fragment after fragment)."""
        key = (a.dtype.str, a.shape, tuple((k, np.shape(ex[k])) for k in self.algo.extras))
        if self._arena is None or self._arena[0] != key:
            cols = self.layout.fields(self.E, self.obs_dtype, a.dtype)
            self._arena = (key, wire.Arena(cols))
        return self._arena[1]

    def collect(self) -> tuple[wire.LazyArrays, int]:
        """One fragment: T steps x E envs, written in place into the buffer it is
        sent in. Returns (arrays, oldest policy version used)."""
        T = self.T
        # exploration schedules read it; fixed for the fragment
        self.job_steps = self.steps * self.E * self.job.sampling.num_workers
        raw_all = [] if self.norm else None
        finished_ret, finished_len = [], []
        min_version = None
        sync_every = max(1, self.job.sampling.sync_interval_steps // self.E)  # vector steps
        for t in range(T):
            if t == 0 or self.steps % sync_every == 0:
                self.swap()
            o = self._obs(self.raw_obs)
            if raw_all is not None:
                raw_all.append(self.raw_obs)
            a, ex, v, state_in = self._act(o)
            if t == 0:
                arena = self._columns(a, ex)
                blob, c = arena.columns()
                if self.state_size:
                    c[STATE][...] = state_in
            min_version = v if min_version is None else min(min_version, v)
            self._put(c, o, t)
            c["action"][t] = a
            for k in self.algo.extras:
                c[k][t] = ex[k]
            if self.state_size:
                c[FIRST][t] = self.first
                self.state = ex["rnn_state"]
            c["valid"][t], c["reward"][t], c["terminated"][t], c["truncated"][t] = self._step(
                a, finished_ret, finished_len)
        boot = self._obs(self.raw_obs)
        a, ex = self._policy(boot)
        self.cached = (a, ex, self.version)  # the next fragment's first action
        self.cached_state = self.state
        self._put(c, boot, None)
        for k in self.algo.extras:
            c[bootstrap(k)][...] = ex[k]
        if self.state_size:
            c[bootstrap(FIRST)][...] = self.first
        rest = {"ep_return": np.array(finished_ret, np.float64),
                "ep_length": np.array(finished_len, np.int64)}
        if raw_all is not None:
            rest.update(self.rms.moments(raw_all))
        rest.update(self.algo.finish_fragment({**c, **rest}))
        return arena.message_arrays(blob, c, rest), int(min_version)
