"""The sampler's stepping code, with no I/O: a `Collector` steps a vector env
with a local policy copy (an `Actor`) and cuts fixed-length columnar fragments,
written in place into the buffers they are sent in (`batch.Layout.fields`)."""

from __future__ import annotations

import numpy as np

from .. import wire
from ..batch import Layout, bootstrap
from ..normalize import RunningMeanStd, moments


class Collector:
    """Steps the vector env and cuts fixed-length columnar fragments (no I/O)."""

    def __init__(self, job, algo, venv, seeds: list[int]):
        self.job = job
        self.algo = algo
        self.venv = venv
        self.T = job.sampling.fragment_length
        self.E = venv.num_envs
        self.layout = Layout(algo.spec, self.T, algo.extras)  # the fragment's columns
        self.norm = job.environment.normalize_obs
        self.rms = RunningMeanStd(algo.spec.obs_shape)
        space = getattr(venv, "single_observation_space", None)
        pixels = space is not None and space.dtype == np.uint8 and not self.norm
        self.obs_dtype = np.uint8 if pixels else np.float32
        raw, _ = venv.reset(seed=seeds if len(seeds) > 1 else seeds[0])
        self.raw_obs = raw
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
        self._arena: tuple[tuple, wire.Arena] | None = None

    def _obs(self, raw: np.ndarray) -> np.ndarray:
        """What the policy sees and the fragment holds: normalised floats, float32, or
        uint8 images as they are (they become float on the network's device)."""
        if self.norm:
            return self.rms.normalize(raw, self.job.environment.clip_obs)
        return raw.astype(self.obs_dtype, copy=False)

    def swap(self) -> None:
        """Load params that arrived, if they are new (or the first)."""
        pending, self.pending = self.pending, None
        if pending is None or pending[0] == self.version:
            return
        version, arrays = pending
        try:
            self.algo.load_policy_arrays(arrays)
        except ValueError:
            self.rejected_params += 1
            return
        if self.norm:
            self.rms.load_arrays(arrays)
        self.version = version
        self.swaps += 1
        self.cached = None  # act again with the new params

    def _act(self, obs: np.ndarray):
        if self.cached is not None:
            a, ex, v = self.cached
            self.cached = None
            return a, ex, v
        a, ex = self.algo.act(obs, env_steps=self.job_steps)
        return a, ex, self.version

    def _step(self, a: np.ndarray, finished_ret: list, finished_len: list):
        """One vector step: (valid, reward, terminated, truncated) as recorded, in
        NEXT_STEP layout (the step after a done step only resets: invalid)."""
        E = self.E
        raw, r, te, tr, info = self.venv.step(self.algo.env_action(a))
        ok = ~self.prev_done
        if "void" in info:  # steps the env did not take (a sequence waiting for its group)
            ok &= ~np.asarray(info["void"], bool)
        if "dropped" in info:  # the envs failed and were made anew: drop their episodes
            ok = np.zeros(E, bool)
            te, tr = np.zeros(E, bool), np.zeros(E, bool)
            self.ep_ret[:] = 0.0
            self.ep_len[:] = 0
        self.ep_ret += np.where(ok, r, 0.0)
        self.ep_len += ok
        for i in np.flatnonzero((te | tr) & ok):
            finished_ret.append(self.ep_ret[i])
            finished_len.append(self.ep_len[i])
            self.ep_ret[i] = 0.0
            self.ep_len[i] = 0
        self.prev_done = te | tr
        self.raw_obs = raw
        self.steps += 1
        return ok, np.where(ok, r, 0.0), te & ok, tr & ok

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
        shape = self.algo.spec.obs_shape
        raw_all = np.empty((T, self.E, *shape), np.float32) if self.norm else None
        finished_ret, finished_len = [], []
        min_version = None
        sync_every = max(1, self.job.sampling.sync_interval_steps // self.E)  # vector steps
        for t in range(T):
            if t == 0 or self.steps % sync_every == 0:
                self.swap()
            o = self._obs(self.raw_obs)
            if raw_all is not None:
                raw_all[t] = self.raw_obs
            a, ex, v = self._act(o)
            if t == 0:
                arena = self._columns(a, ex)
                blob, c = arena.columns()
            min_version = v if min_version is None else min(min_version, v)
            c["obs"][t] = o
            c["action"][t] = a
            for k in self.algo.extras:
                c[k][t] = ex[k]
            c["valid"][t], c["reward"][t], c["terminated"][t], c["truncated"][t] = self._step(
                a, finished_ret, finished_len)
        boot = self._obs(self.raw_obs)
        a, ex = self.algo.act(boot, env_steps=self.job_steps)
        self.cached = (a, ex, self.version)  # the next fragment's first action
        c[bootstrap("obs")][...] = boot
        for k in self.algo.extras:
            c[bootstrap(k)][...] = ex[k]
        rest = {"ep_return": np.array(finished_ret, np.float64),
                "ep_length": np.array(finished_len, np.int64)}
        if raw_all is not None:
            rest.update(moments(raw_all, shape))
        rest.update(self.algo.finish_fragment({**c, **rest}))
        return arena.message_arrays(blob, c, rest), int(min_version)
