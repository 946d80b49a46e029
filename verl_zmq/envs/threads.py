"""A vector env whose envs step at the same time in threads: for envs that wait
rather than compute (a simulator in another process, a robot, a game server, a
reward model behind a socket), whose waits release the GIL. With E such envs a
vector step takes about one env's wait, not E of them.

`environment.vectorization = "threads"`. It is gymnasium's `SyncVectorEnv`
(NEXT_STEP autoreset, the same observations, infos and seeding) with each
vector step's env calls, steps and autoresets alike, run first in a thread pool
and their results handed to the sync loop in order.

An env that can start a step and finish it later (`SplitStep`: `begin_step(action)`
sends the action to the simulator or socket, the `step` that follows reads the
reply) needs no thread: every env's step is begun, then each is finished in
turn by the sync loop, so the waits overlap in the sampler's own thread (a
tenth of the CPU a thread hand-off costs). Used where every env of the vector
has it and no action wrapper stands between the vector's action and the env's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym
from gymnasium.vector.utils import iterate

__all__ = ["SplitStep", "ThreadVectorEnv"]


@runtime_checkable
class SplitStep(Protocol):
    """An env whose step can be begun (`begin_step(action)`: the action sent) and
    finished by the `step(action)` that follows (the reply read); a `step` not
    begun does both."""

    def begin_step(self, action: Any) -> None: ...


def _begin(env: gym.Env) -> Callable[[Any], None] | None:
    """The env's `begin_step`, where the vector's action reaches it unchanged."""
    while isinstance(env, gym.Wrapper):
        if isinstance(env, gym.ActionWrapper):
            return None
        env = env.env
    return env.begin_step if isinstance(env, SplitStep) else None


class _Ahead(gym.Wrapper):
    """Hands back a result computed ahead (in a pool thread) in place of the call."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.ready: Any = None

    def step(self, action: Any) -> Any:
        out, self.ready = self.ready, None
        return out if out is not None else self.env.step(action)

    def reset(self, **kw: Any) -> Any:
        out, self.ready = self.ready, None
        return out if out is not None and not kw else self.env.reset(**kw)


class ThreadVectorEnv(gym.vector.SyncVectorEnv):
    """`SyncVectorEnv` whose envs take each vector step at once, in threads."""

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], **kw: Any):
        super().__init__([lambda f=f: _Ahead(f()) for f in env_fns], **kw)
        self.pool = ThreadPoolExecutor(max_workers=max(1, len(env_fns) - 1),
                                       thread_name_prefix="env")
        begins = [_begin(e.env) for e in self.envs]
        self.begins = [b for b in begins if b is not None] if all(begins) else None

    def step(self, actions: Any) -> Any:
        if self.begins is not None:  # every env's step begun, then finished in order
            for i, (begin, a) in enumerate(zip(self.begins, iterate(self.action_space,
                                                                    actions), strict=True)):
                if not self._autoreset_envs[i]:
                    begin(a)
            return super().step(actions)
        def ahead(i: int, action: Any) -> None:
            env = self.envs[i]
            env.ready = env.env.reset() if self._autoreset_envs[i] else env.env.step(action)

        acts = list(iterate(self.action_space, actions))
        # every env's call at once, the last in this thread (one hand-off fewer: a
        # tenth of a small vector step's CPU); .result() re-raises an env's error here
        futures = [self.pool.submit(ahead, i, a) for i, a in enumerate(acts[:-1])]
        ahead(len(acts) - 1, acts[-1])
        for f in futures:
            f.result()
        return super().step(actions)

    def close_extras(self, **kw: Any) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        super().close_extras(**kw)
