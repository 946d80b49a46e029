"""Multi-agent envs: PettingZoo's `ParallelEnv` and `AECEnv` behind one
interface, and the spaces each policy of a job sees.

`AgentEnv` turns either kind into decisions: `poll()` says which agents must
act now (a parallel env: every live agent at once; an AEC env: the agent whose
turn it is), the rewards each agent earned since it last acted, and the agents
whose episode ended (terminated or truncated, with their last observation);
`step({agent: action})` applies them. Agents that leave mid-episode end there;
agents that join start then; an AEC env's finished agents are stepped with
None internally. When no agent is left the env resets itself: the next poll
starts a new episode.

A policy's observation is its agent's observation as the env gives it, with,
where the job asks for them, the agent's one-hot index (`multiagent.agent_index`)
and, for the value function alone, the env's `state()` (`centralised_critic`;
every agent's observation concatenated where the env has no state). An
`action_mask` entry of a Dict observation masks the policy's logits (`EnvSpec.mask`).
Numpy only (and the env's own imports).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from ..config import Environment
from ..config.multiagent import MultiAgent
from ..importing import load_object
from .spaces import MASK_KEY, Leaf, SpaceError, action_space, mask_column, obs_leaves
from .spec import EnvSpec

AGENT_INDEX, STATE, MASK = "agent_index", "state", MASK_KEY


class AgentEnvError(ValueError):
    """A multi-agent env or its policies that cannot be used; the message says why."""


def is_agent_env(obj: Any) -> bool:
    """A PettingZoo env (parallel or AEC), by its interface."""
    return hasattr(obj, "possible_agents") and callable(getattr(obj, "observation_space", None)) \
        and not isinstance(obj, gym.Env)


def _build(cfg: Environment) -> Any:
    """The env `cfg.id` names ("module:fn" or "module:Class"), with its kwargs and
    `environment.wrappers` (PettingZoo's and SuperSuit's take the env first)."""
    if ":" not in cfg.id:
        return None
    try:
        obj = load_object(cfg.id, "environment.id")
    except ValueError:  # gymnasium's "module:Name-v0", or an id envs.make explains
        return None
    if isinstance(obj, type) and issubclass(obj, gym.Env):
        return None
    try:
        env = obj(**cfg.kwargs)
    except TypeError as e:
        raise AgentEnvError(f"environment.kwargs for {cfg.id!r}: {e}") from None
    if not is_agent_env(env):
        if hasattr(env, "close"):
            env.close()
        return None
    for i, w in enumerate(cfg.wrappers):
        path, kw = (w["wrapper"], w.get("kwargs", {})) if isinstance(w, dict) else (w, {})
        try:
            env = load_object(path, f"environment.wrappers[{i}]")(env, **kw)
        except (TypeError, ValueError) as e:
            raise AgentEnvError(f"environment.wrappers[{i}] {path}: {e}") from None
    return env


def make_agent_env(cfg: Environment) -> Any:
    """A PettingZoo env as the job names it; AgentEnvError where it is not one."""
    env = _build(cfg)
    if env is None:
        raise AgentEnvError(f"environment.id {cfg.id!r} is not a PettingZoo env")
    return env


@functools.lru_cache(maxsize=32)
def _kind(env_id: str, kwargs: str, wrappers: str) -> str:
    cfg = Environment(id=env_id, kwargs=_from_key(kwargs), wrappers=_from_key(wrappers))
    env = _build(cfg)
    if env is None:
        return ""
    try:
        return "parallel" if _parallel(env) else "aec"
    finally:
        env.close()


def _from_key(text: str) -> Any:
    """The JSON a cache key was made of, back."""
    import json

    return json.loads(text)


def agent_env_kind(cfg: Environment) -> str:
    """"parallel" or "aec" for a PettingZoo env, "" for a gymnasium one (built once
    per process to find out, where the id is a "module:fn")."""
    import json

    if ":" not in cfg.id:
        return ""
    return _kind(cfg.id, json.dumps(cfg.kwargs, sort_keys=True, default=str),
                 json.dumps(cfg.wrappers, sort_keys=True, default=str))


def is_multiagent(cfg: Environment) -> bool:
    """Whether the job's env is a PettingZoo one."""
    return bool(agent_env_kind(cfg))


def _parallel(env: Any) -> bool:
    """A ParallelEnv, not an AECEnv (by class: an AEC env has no agent_selection
    before its first reset)."""
    return not any(c.__name__ == "AECEnv" for c in type(env).__mro__)


# -- spaces ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Agents:
    """What a multi-agent env's agents are: ids, spaces, state width."""

    names: tuple[str, ...]
    obs: dict[str, gym.Space[Any]]
    act: dict[str, gym.Space[Any]]
    state_width: int  # the env's state(), or every agent's observation concatenated
    has_state: bool


def describe(env: Any) -> Agents:
    """The env's agents and spaces, and how wide the critic's state is: its
    `state_space`, else one `state()` after a reset, else every observation."""
    names = tuple(env.possible_agents)
    obs = {a: env.observation_space(a) for a in names}
    act = {a: env.action_space(a) for a in names}
    width = 0
    with contextlib.suppress(AttributeError, NotImplementedError):
        width = int(np.prod(env.state_space.shape))
    if not width:
        with contextlib.suppress(AttributeError, NotImplementedError, TypeError):
            env.reset(seed=0)
            width = int(np.asarray(env.state()).size)
    if width:
        return Agents(names, obs, act, width, True)
    try:
        width = sum(int(np.prod(s.shape)) for s in obs.values())
    except TypeError:
        width = 0
    return Agents(names, obs, act, width, False)


@functools.lru_cache(maxsize=32)
def _agents_of(env_id: str, kwargs: str, wrappers: str) -> Agents:
    cfg = Environment(id=env_id, kwargs=_from_key(kwargs), wrappers=_from_key(wrappers))
    env = make_agent_env(cfg)
    try:
        return describe(env)
    finally:
        env.close()


def agents_of(cfg: Environment) -> Agents:
    import json

    return _agents_of(cfg.id, json.dumps(cfg.kwargs, sort_keys=True, default=str),
                      json.dumps(cfg.wrappers, sort_keys=True, default=str))


def policy_agents(ma: MultiAgent, agents: Agents, policy: str) -> tuple[str, ...]:
    """The agents that may act for `policy`: by `policy_mapping` (with `mapping_fn`,
    every agent: the function may map any of them to it)."""
    if ma.mapping_fn:
        return agents.names
    return tuple(a for a in agents.names if ma.map_agent(a) == policy)


def _same(spaces: list[gym.Space[Any]]) -> bool:
    return all(s == spaces[0] for s in spaces[1:])


def policy_spec(cfg: Environment, ma: MultiAgent, policy: str) -> EnvSpec:
    """The spaces `policy` acts in: its agents' (which must agree), with the agent
    index and the critic's state where the job asks for them."""
    agents = agents_of(cfg)
    mine = policy_agents(ma, agents, policy)
    if not mine:
        raise AgentEnvError(f"multiagent: no agent of {cfg.id!r} is mapped to policy "
                            f"{policy!r} (agents: {', '.join(agents.names)}); map one in "
                            f"multiagent.policy_mapping")
    for table, what in ((agents.obs, "observation"), (agents.act, "action")):
        if not _same([table[a] for a in mine]):
            kinds = {a: str(table[a]) for a in mine}
            raise AgentEnvError(
                f"multiagent: the agents of policy {policy!r} have different {what} spaces "
                f"({kinds}); give each kind of agent a policy of its own in "
                f"[multiagent.policies] and multiagent.policy_mapping")
    try:
        leaves = list(obs_leaves(agents.obs[mine[0]], f"{cfg.id}: {mine[0]}'s observation"))
        act = action_space(agents.act[mine[0]], f"{cfg.id}: {mine[0]}'s action space")
    except SpaceError as e:
        raise AgentEnvError(str(e)) from None
    critic: tuple[str, ...] = ()
    if ma.agent_index:
        leaves.append(Leaf((AGENT_INDEX,), "box", (len(agents.names),)))
    if ma.centralised_critic:
        if any(leaf.kind == "image" for leaf in leaves):
            raise AgentEnvError("multiagent.centralised_critic: not with image observations")
        if not agents.state_width:
            raise AgentEnvError(f"multiagent.centralised_critic: {cfg.id!r} has no state() "
                                f"and its observations cannot be concatenated")
        leaves.append(Leaf((STATE,), "box", (agents.state_width,)))
        critic = (".".join(("obs", STATE)),)
    mask = mask_column(leaves, act)
    structured = len(leaves) > 1 or leaves[0].path or leaves[0].kind not in ("box", "image")
    shape = (sum(leaf.width for leaf in leaves),) if structured else leaves[0].shape
    index = {a: i for i, a in enumerate(agents.names)}
    return EnvSpec(shape, act.kind == "discrete", act.n, act.shape, act.low, act.high,
                   tuple(leaves) if structured else (),
                   "" if act.kind in ("discrete", "box") else act.kind, act.nvec,
                   mask=mask, critic_only=critic, agents=tuple(index[a] for a in mine))


# -- stepping -------------------------------------------------------------------------

@dataclass
class Polled:
    """What an env copy says after a step (or a reset): who acts now (their
    observations), the reward each agent earned since it last acted, and who
    finished (last observation, terminated, truncated)."""

    act: dict[str, Any] = field(default_factory=dict)
    rewards: dict[str, float] = field(default_factory=dict)
    ended: dict[str, tuple[Any, bool, bool]] = field(default_factory=dict)
    infos: dict[str, dict[str, Any]] = field(default_factory=dict)
    started: bool = False  # a new episode begins with these decisions


class AgentEnv:
    """One copy of a PettingZoo env as decisions (see the module)."""

    def __init__(self, env: Any, seed: int):
        self.env = env
        self.parallel = _parallel(env)
        self.seed = seed
        self.episodes = 0
        self._pending: Polled | None = None

    def reset(self) -> Polled:
        self.episodes += 1
        seed = self.seed + self.episodes - 1
        if self.parallel:
            obs, infos = self.env.reset(seed=seed)
            return Polled(act=dict(obs), infos=dict(infos), started=True)
        self.env.reset(seed=seed)
        p = self._advance(Polled(started=True))
        return p

    def _advance(self, p: Polled) -> Polled:
        """AEC: step finished agents with None until one must act (or none is left)."""
        env = self.env
        while env.agents:
            agent = env.agent_selection
            obs, r, te, tr, info = env.last()
            p.rewards[agent] = p.rewards.get(agent, 0.0) + float(r)
            if te or tr:
                p.ended[agent] = (obs, bool(te), bool(tr))
                p.infos[agent] = info
                env.step(None)
                continue
            p.act[agent] = obs
            p.infos[agent] = info
            return p
        return p

    def step(self, actions: dict[str, Any]) -> Polled:
        """Apply the actions of the agents that had to act; what comes next. With no
        agent left, the episode is over: the next `reset` starts another."""
        if self.parallel:
            obs, rew, te, tr, infos = self.env.step(actions)
            p = Polled(infos=dict(infos))
            for a, o in obs.items():
                p.rewards[a] = float(rew.get(a, 0.0))
                if te.get(a, False) or tr.get(a, False):
                    p.ended[a] = (o, bool(te.get(a, False)), bool(tr.get(a, False)))
                elif a in self.env.agents:
                    p.act[a] = o
            return p
        (agent, action), = actions.items()
        self.env.step(action)
        return self._advance(Polled())

    @property
    def over(self) -> bool:
        return not self.env.agents

    def state(self, agents: tuple[str, ...], last_obs: dict[str, Any]) -> np.ndarray:
        """The critic's state: the env's, or every agent's last observation, flat."""
        try:
            return np.asarray(self.env.state(), np.float32).reshape(-1)
        except (AttributeError, NotImplementedError):
            return np.concatenate([np.asarray(last_obs[a], np.float32).reshape(-1)
                                   if a in last_obs else np.zeros(0, np.float32)
                                   for a in agents])

    def close(self) -> None:
        self.env.close()


MappingFn = Callable[[str, int], str]


def mapping_fn(ma: MultiAgent) -> MappingFn:
    """The agent -> policy mapping of an episode: `mapping_fn`, else the globs."""
    if ma.mapping_fn:
        fn: MappingFn = load_object(ma.mapping_fn, "multiagent.mapping_fn")
        return fn
    return lambda agent, episode: ma.map_agent(agent)


def mask_of(obs: Any, width: int) -> np.ndarray | None:
    """An agent's action mask from its raw observation (a Dict's `action_mask`)."""
    if isinstance(obs, dict) and MASK in obs:
        m = np.asarray(obs[MASK]).reshape(-1)
        return m.astype(bool) if m.size == width else None
    return None
