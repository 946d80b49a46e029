"""Job files: TOML loaded into frozen dataclasses, one per section.

Every key has a type and a default; unknown keys, wrong types and bad values
fail at load with the file, the dotted key, what was expected and, for
misspelt keys, a did-you-mean. Imports nothing heavy (the launcher uses it).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal


class ConfigError(Exception):
    """A job file (or an override) that cannot be used; the message says where and why."""


# --------------------------------------------------------------------------- sections


@dataclass(frozen=True)
class Experiment:
    """Who the run is: its name (the run folder), its seed, where runs go."""

    name: str = "verl"  # the run folder is runs_dir/name/<stamp>
    seed: int = 0  # seeds envs (with sampler and env index), networks, evaluation
    runs_dir: str = "runs"


@dataclass(frozen=True)
class Environment:
    """The gymnasium env every sampler and the evaluator build."""

    id: str = "CartPole-v1"  # a registered gymnasium id, or module:Class
    kwargs: dict = field(default_factory=dict)  # passed to gymnasium.make
    max_episode_steps: int = 0  # 0: the env's own limit
    vectorization: Literal["auto", "native", "sync"] = "auto"  # auto: native when it exists
    normalize_obs: bool = False  # running mean/std, merged by the learner, sent with params
    clip_obs: float = 10.0  # normalised observations are clipped to +-clip_obs
    reward_fn: str = ""  # "module:function" applied to (obs, action, reward, next_obs)
    record_video: str = ""  # evaluator: folder for videos of its first eval episode
    step_timeout_s: float = 0.0  # > 0: envs step in worker processes; a slower step is a hang
    max_env_failures: int = 10  # hangs or raises before a sampler gives up (exit 1)


@dataclass(frozen=True)
class Sampling:
    """Samplers: how many, how many envs each, fragment shape, param syncing."""

    num_workers: int = 4  # sampler processes (per peer in DAPO)
    num_envs_per_worker: int = 2  # envs stepped as one vector env by each sampler
    mode: Literal["async", "sync"] = "async"  # sync: wait for new params after each fragment
    fragment_length: int = 64  # T: vector steps per fragment (T x E env steps)
    sync_interval_steps: int = 20  # swap in new params at most every this many env steps
    max_fragments_ahead: int = 2  # async: fragments shipped per policy version before waiting
    torch_threads: int = 1  # torch threads per sampler (resources.sampler.cpu wins)


@dataclass(frozen=True)
class Replay:
    """Replay shards: FIFO for on-policy, uniform/prioritized for off-policy."""

    mode: Literal["fifo", "uniform", "prioritized"] = "fifo"  # fifo for ppo and dapo
    capacity: int = 100_000  # transitions per shard
    when_full: Literal["block", "drop_oldest"] = "block"  # block: samplers wait (backpressure)
    alpha: float = 0.6
    beta: float = 0.4
    beta_anneal_steps: int = 100_000
    priority_eps: float = 1e-6
    samples_per_insert: float = 0.0  # 0: no replay-ratio limiter
    min_size_to_sample: int = 1_000
    error_buffer: float = 0.0
    snapshot_interval_s: float = 0.0  # 0: snapshot only on stop


@dataclass(frozen=True)
class PPOParams:
    """PPO hyper-parameters (Schulman et al. 2017)."""

    learning_rate: float = 3e-4
    lr_schedule: Literal["constant", "linear"] = "constant"
    batch_size: int = 512  # env steps per update
    minibatch_size: int = 64
    n_epochs: int = 10
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_range: float = 0.2
    clip_schedule: Literal["constant", "linear"] = "constant"
    clip_range_vf: float = 0.0  # 0: no value clipping
    ent_coef: float = 0.0
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    normalize_advantage: bool = True
    target_kl: float = 0.0  # 0: no early stop on KL


@dataclass(frozen=True)
class DQNParams:
    """DQN hyper-parameters (double DQN, optional dueling, n-step)."""

    learning_rate: float = 1e-3
    batch_size: int = 64
    gamma: float = 0.99
    n_step: int = 1
    target_update_interval: int = 500
    tau: float = 1.0
    learning_starts: int = 1_000
    exploration: Literal["annealed", "apex"] = "annealed"
    eps_start: float = 1.0
    eps_end: float = 0.05
    eps_decay_steps: int = 10_000
    apex_eps: float = 0.4
    apex_alpha: float = 7.0
    max_grad_norm: float = 10.0


@dataclass(frozen=True)
class SACParams:
    """SAC hyper-parameters (Haarnoja et al. 2018, automatic entropy)."""

    learning_rate: float = 3e-4
    batch_size: int = 256
    gamma: float = 0.99
    tau: float = 0.005
    learning_starts: int = 1_000
    init_alpha: float = 1.0
    target_entropy: float = 0.0  # 0: -dim(action)


@dataclass(frozen=True)
class DAPOParams(PPOParams):
    """DAPO local update: PPO with decoupled clip and dynamic sampling."""

    clip_low: float = 0.2
    clip_high: float = 0.28
    loss_agg: Literal["step-mean", "fragment-mean"] = "step-mean"
    dynamic_sampling: bool = False
    dynamic_tolerance: float = 1e-6
    max_fill_batches: int = 4


ALGO_PARAMS: dict[str, type] = {
    "ppo": PPOParams,
    "dqn": DQNParams,
    "sac": SACParams,
    "dapo": DAPOParams,
}


@dataclass(frozen=True)
class Policy:
    """Network shape shared by the algorithm's networks."""

    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64])
    activation: Literal["tanh", "relu"] = "tanh"
    shared_trunk: bool = False
    log_std_init: float = 0.0
    dueling: bool = False


@dataclass(frozen=True)
class BehaviourCloning:
    """Learning from demonstrations: a behaviour-cloning term in the policy loss."""

    demos: str = ""  # a demonstrations .npz (`verl record` writes one); empty: off
    mixing_ratio: float = 0.0  # weight of the behaviour-cloning loss
    decay_steps: int = 0  # env steps over which the weight decays linearly to 0; 0: never
    batch_size: int = 256  # demonstration steps per update


@dataclass(frozen=True)
class Algorithm:
    """Which algorithm, its hyper-parameters and its policy network."""

    name: Literal["ppo", "dqn", "sac", "dapo"] = "ppo"
    params: Any = None  # the algorithm's params dataclass, chosen by `name`
    policy: Policy = field(default_factory=Policy)
    bc: BehaviourCloning = field(default_factory=BehaviourCloning)


@dataclass(frozen=True)
class Training:
    """The learner: budget, param publishing, staleness, prefetch, device."""

    total_timesteps: int = 100_000  # env steps, dropped fragments included
    sync_interval_updates: int = 1  # publish params every this many updates
    max_policy_lag: int = 4  # on-policy: drop fragments this many updates older
    prefetch: int = 4  # fragments requested beyond one batch, per shard
    device: str = "cpu"  # cpu or cuda
    torch_threads: int = 1  # resources.learner.cpu wins
    learn: bool = True  # false: drain batches without updating (pipeline benchmarks)
    update_delay_s: float = 0.0  # sleep after each update: a learner slowed on purpose (soak)


@dataclass(frozen=True)
class Logging:
    """Metrics cadence and log level."""

    interval_s: float = 5.0  # every role logs a metrics event this often
    level: Literal["debug", "info", "warning", "error"] = "info"


@dataclass(frozen=True)
class Evaluation:
    """The evaluator: cadence in env steps, episodes, its own seed, early stop."""

    interval_steps: int = 10_000  # evaluate params every this many env steps
    n_eval_episodes: int = 10  # run at once, one env each
    seed: int = 1_000_003  # episode i is seeded seed + i, apart from training envs
    deterministic: bool = True  # the policy's mode, not a sample
    stop_at_return: float | None = None  # stop the job once an eval reaches it


@dataclass(frozen=True)
class Checkpoint:
    """Learner checkpoints: cadence in env steps and how many to keep."""

    interval_steps: int = 50_000  # learner writes checkpoints/step_<n>.pt this often
    keep: int = 3  # step checkpoints kept (latest.pt and best.pt besides)


@dataclass(frozen=True)
class Gossip:
    """Decentralised peers: neighbour choice, async mixing, compression."""

    neighbor_count: int = 2
    update_interval: int = 5
    selection_strategy: Literal["random", "reward_based", "topology"] = "random"
    topology: Literal["ring", "exponential"] = "ring"
    temperature: float = 1.0
    max_queue_size: int = 8
    priority_fn: str = "reward"
    sync_interval: int = 5
    mixing: Literal["uniform", "reward_softmax"] = "uniform"
    mix_rate: float = 0.5
    staleness_updates: int = 50
    compression: Literal["none", "fp16", "terngrad", "topk_delta"] = "none"
    topk_fraction: float = 0.05


@dataclass(frozen=True)
class Security:
    """CURVE: "auto" turns it on when the plan has a host that is not local."""

    curve: bool | str = "auto"


@dataclass(frozen=True)
class Launch:
    """How many of each role, ports, liveness, restarts, remote start."""

    replay_shards: int = 1
    learners: int = 1
    evaluators: int = 1  # 0: none (the learner then stops the job itself)
    peers: int = 0  # dapo: learner peers, each with its own group
    port_range: list[int] = field(default_factory=lambda: [29500, 29999])  # roles bind here
    registry_port: int = 0  # 0: the first port of port_range
    heartbeat_interval_s: float = 1.0
    heartbeat_liveness: int = 3  # missed heartbeats before a member counts as dead
    max_restarts: int = 3  # per role process, with exponential backoff
    max_restarts_per_role: dict = field(default_factory=dict)  # e.g. {sampler = 10}
    restart_backoff_s: float = 1.0  # first restart delay; doubles each time, up to 60 s
    restart_window_s: float = 600.0  # up this long: the role's restart budget starts afresh
    grace_s: float = 10.0  # between SIGTERM and SIGKILL when stopping
    python: str = ""  # interpreter on remote hosts (default python3)
    workdir: str = ""  # cd here on remote hosts before starting a role
    ssh_options: list[str] = field(default_factory=list)  # extra ssh arguments


@dataclass(frozen=True)
class RoleResources:
    """What one role may use: threads, memory ("2GB"), GPUs."""

    cpu: int = 0  # 0: role default
    memory: str = ""  # empty: no limit
    gpu: int = 0


@dataclass(frozen=True)
class Resources:
    """Per-role resources, as the seed's `resources` section."""

    learner: RoleResources = field(default_factory=RoleResources)
    sampler: RoleResources = field(default_factory=RoleResources)
    replay: RoleResources = field(default_factory=RoleResources)
    evaluator: RoleResources = field(default_factory=RoleResources)
    peer: RoleResources = field(default_factory=RoleResources)


REQUIRED_SECTIONS = ("experiment", "environment", "algorithm", "training")


@dataclass(frozen=True)
class Job:
    """A whole job: one frozen dataclass per section of the TOML file."""

    experiment: Experiment = field(default_factory=Experiment)
    environment: Environment = field(default_factory=Environment)
    sampling: Sampling = field(default_factory=Sampling)
    replay: Replay = field(default_factory=Replay)
    algorithm: Algorithm = field(default_factory=Algorithm)
    training: Training = field(default_factory=Training)
    logging: Logging = field(default_factory=Logging)
    evaluation: Evaluation = field(default_factory=Evaluation)
    checkpoint: Checkpoint = field(default_factory=Checkpoint)
    gossip: Gossip = field(default_factory=Gossip)
    security: Security = field(default_factory=Security)
    launch: Launch = field(default_factory=Launch)
    resources: Resources = field(default_factory=Resources)

    @property
    def registry_port(self) -> int:
        return self.launch.registry_port or self.launch.port_range[0]

    @property
    def fragment_steps(self) -> int:
        return self.sampling.fragment_length * self.sampling.num_envs_per_worker


# --------------------------------------------------------------------------- loading


def load_job(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Job:
    """Read, override and validate a job file; raise ConfigError naming file and key."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read job file: {e.strerror or e}") from None
    return loads_job(text, str(path), overrides)


def loads_job(text: str, source: str = "<job>", overrides=()) -> Job:
    """Like load_job, from TOML text; `source` names it in errors."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{source}: TOML syntax error: {e}") from None
    for item in overrides:
        apply_override(raw, item, source)
    return build_job(raw, source)


def parse_override(item: str) -> tuple[list[str], Any]:
    """`section.key=value`: the value is a TOML value if it parses, else a string."""
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected section.key=value")
    key, _, value = item.partition("=")
    parts = [p.strip() for p in key.strip().split(".")]
    if len(parts) < 2 or not all(parts):
        raise ConfigError(f"--set {item!r}: expected a dotted key like training.total_timesteps")
    try:
        parsed = tomllib.loads(f"v = {value.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        parsed = value.strip()
    return parts, parsed


def apply_override(raw: dict, item: str, source: str = "<job>") -> None:
    parts, value = parse_override(item)
    node = raw
    for p in parts[:-1]:
        nxt = node.setdefault(p, {})
        if not isinstance(nxt, dict):
            raise ConfigError(f"{source}: --set {item!r}: {'.'.join(parts[:-1])} is not a table")
        node = nxt
    node[parts[-1]] = value


def build_job(raw: dict, source: str = "<job>") -> Job:
    missing = [s for s in REQUIRED_SECTIONS if s not in raw]
    if missing:
        raise ConfigError(
            f"{source}: missing section [{missing[0]}]; a job file needs "
            + ", ".join(f"[{s}]" for s in REQUIRED_SECTIONS)
        )
    job = _build_dataclass(Job, raw, "", source)
    _check_semantics(job, source)
    return job


def _did_you_mean(key: str, choices) -> str:
    close = difflib.get_close_matches(key, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _build_dataclass(cls, raw: Any, prefix: str, source: str):
    where = prefix.rstrip(".") or "top level"
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: {where}: expected a table, got {_tname(raw)}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    for key in raw:
        if key not in fields:
            valid = ", ".join(sorted(fields))
            raise ConfigError(
                f"{source}: unknown key {prefix}{key}{_did_you_mean(key, fields)}; "
                f"valid keys in {where}: {valid}"
            )
    kwargs = {}
    for name in fields:
        if name not in raw:
            continue
        key = f"{prefix}{name}"
        if cls is Algorithm and name == "params":
            continue
        kwargs[name] = _convert(raw[name], hints[name], key, source)
    if cls is Algorithm:
        algo = kwargs.get("name", "ppo")
        kwargs["params"] = _build_dataclass(
            ALGO_PARAMS[algo], raw.get("params", {}), f"{prefix}params.", source
        )
    return cls(**kwargs)


def _tname(v: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a float", str: "a string",
            list: "an array", dict: "a table"}.get(type(v), type(v).__name__)


def _convert(value: Any, tp: Any, key: str, source: str):  # noqa: C901 - one case per type
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        return _build_dataclass(tp, value, key + ".", source)
    if origin is Literal:
        choices = typing.get_args(tp)
        if value not in choices:
            hint = _did_you_mean(str(value), [str(c) for c in choices])
            raise ConfigError(
                f"{source}: {key}: expected one of {', '.join(map(repr, choices))}, "
                f"got {value!r}{hint}"
            )
        return value
    if origin in (types.UnionType, typing.Union):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _convert(value, a, key, source)
            except ConfigError as e:
                errors.append(e)
        names = " or ".join(_expect(a) for a in args if a is not type(None))
        raise ConfigError(f"{source}: {key}: expected {names}, got {_tname(value)} {value!r}")
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{source}: {key}: expected {_expect(tp)}, got {_tname(value)}")
        (item,) = typing.get_args(tp)
        return [_convert(v, item, f"{key}[{i}]", source) for i, v in enumerate(value)]
    if tp is dict or origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{source}: {key}: expected a table, got {_tname(value)}")
        return dict(value)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{source}: {key}: expected true or false, got {_tname(value)}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{source}: {key}: expected an integer, got {_tname(value)} "
                              f"{value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{source}: {key}: expected a number, got {_tname(value)} "
                              f"{value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{source}: {key}: expected a string, got {_tname(value)}")
        return value
    if tp is Any:
        return value
    raise ConfigError(f"{source}: {key}: unsupported type {tp}")  # pragma: no cover


def _expect(tp: Any) -> str:
    if typing.get_origin(tp) is list:
        return f"an array of {_expect(typing.get_args(tp)[0])}s"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string",
            dict: "a table"}.get(tp, str(tp))


def _positive(source: str, pairs: list[tuple[str, float]]) -> None:
    for key, v in pairs:
        if not (v > 0) or (isinstance(v, float) and math.isinf(v)):
            raise ConfigError(f"{source}: {key}: expected a positive number, got {v!r}")


def _check_semantics(job: Job, source: str) -> None:
    s, lr, tr = job.sampling, job.launch, job.training
    _positive(source, [
        ("sampling.num_workers", s.num_workers),
        ("sampling.num_envs_per_worker", s.num_envs_per_worker),
        ("sampling.fragment_length", s.fragment_length),
        ("sampling.sync_interval_steps", s.sync_interval_steps),
        ("sampling.max_fragments_ahead + 1", s.max_fragments_ahead + 1),
        ("sampling.torch_threads", s.torch_threads),
        ("training.total_timesteps", tr.total_timesteps),
        ("training.sync_interval_updates", tr.sync_interval_updates),
        ("training.prefetch", tr.prefetch),
        ("training.torch_threads", tr.torch_threads),
        ("replay.capacity", job.replay.capacity),
        ("launch.heartbeat_interval_s", lr.heartbeat_interval_s),
        ("launch.heartbeat_liveness", lr.heartbeat_liveness),
        ("launch.restart_window_s", lr.restart_window_s),
        ("logging.interval_s", job.logging.interval_s),
        ("evaluation.interval_steps", job.evaluation.interval_steps),
        ("evaluation.n_eval_episodes", job.evaluation.n_eval_episodes),
        ("checkpoint.interval_steps", job.checkpoint.interval_steps),
    ])
    if len(lr.port_range) != 2 or not (1024 <= lr.port_range[0] < lr.port_range[1] <= 65535):
        raise ConfigError(
            f"{source}: launch.port_range: expected [low, high] with 1024 <= low < high <= "
            f"65535, got {lr.port_range!r}"
        )
    if lr.registry_port and not (lr.port_range[0] <= lr.registry_port <= lr.port_range[1]):
        raise ConfigError(
            f"{source}: launch.registry_port: expected a port inside launch.port_range "
            f"{lr.port_range}, got {lr.registry_port}"
        )
    for role, n in lr.max_restarts_per_role.items():
        if role not in ("registry", "replay", "learner", "evaluator", "sampler", "peer"):
            raise ConfigError(f"{source}: launch.max_restarts_per_role.{role}: not a role "
                              f"(registry, replay, learner, evaluator, sampler, peer)")
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ConfigError(f"{source}: launch.max_restarts_per_role.{role}: expected a "
                              f"non-negative integer, got {n!r}")
    if job.security.curve not in (True, False, "auto"):
        raise ConfigError(
            f"{source}: security.curve: expected true, false or \"auto\", "
            f"got {job.security.curve!r}"
        )
    on_policy = job.algorithm.name in ("ppo", "dapo")
    if on_policy and job.replay.mode != "fifo":
        raise ConfigError(
            f"{source}: replay.mode: {job.algorithm.name} is on-policy and needs \"fifo\", "
            f"got {job.replay.mode!r}"
        )
    if not on_policy and job.replay.mode == "fifo":
        raise ConfigError(
            f"{source}: replay.mode: {job.algorithm.name} is off-policy and needs "
            f"\"uniform\" or \"prioritized\", got \"fifo\""
        )
    if job.replay.capacity < job.fragment_steps:
        raise ConfigError(
            f"{source}: replay.capacity: {job.replay.capacity} transitions cannot hold one "
            f"fragment of sampling.fragment_length x sampling.num_envs_per_worker = "
            f"{job.fragment_steps}; raise replay.capacity"
        )
    R = job.replay
    if R.samples_per_insert > 0 and R.error_buffer < max(1.0, R.samples_per_insert):
        raise ConfigError(
            f"{source}: replay.error_buffer: {R.error_buffer} would let the replay-ratio "
            f"limiter block sampling and inserting at once; use at least "
            f"max(1, replay.samples_per_insert) = {max(1.0, R.samples_per_insert)}")
    bc = job.algorithm.bc
    if bc.demos and job.algorithm.name not in ("ppo", "dapo", "sac"):
        raise ConfigError(f"{source}: algorithm.bc.demos: behaviour cloning is for ppo, dapo "
                          f"and sac, not {job.algorithm.name}")
    if bc.mixing_ratio < 0 or bc.decay_steps < 0 or bc.batch_size < 1:
        raise ConfigError(f"{source}: algorithm.bc: mixing_ratio and decay_steps must be >= 0 "
                          f"and batch_size >= 1")
    p = job.algorithm.params
    if on_policy and p.minibatch_size > p.batch_size:
        raise ConfigError(
            f"{source}: algorithm.params.minibatch_size: {p.minibatch_size} is larger than "
            f"algorithm.params.batch_size {p.batch_size}"
        )


# --------------------------------------------------------------------------- writing


def job_to_dict(job: Job) -> dict:
    """The job as plain TOML-able data (None values left out)."""

    def strip(v):
        if isinstance(v, dict):
            return {k: strip(x) for k, x in v.items() if x is not None}
        if isinstance(v, list):
            return [strip(x) for x in v]
        return v

    return strip(dataclasses.asdict(job))


def dumps_toml(data: dict) -> str:
    """A small TOML writer for what job files hold (scalars, arrays, tables)."""
    lines: list[str] = []

    def emit(table: dict, path: list[str]) -> None:
        scalars = {k: v for k, v in table.items() if not isinstance(v, dict)}
        subs = {k: v for k, v in table.items() if isinstance(v, dict)}
        if path and (scalars or not subs):
            lines.append(f"[{'.'.join(_tkey(p) for p in path)}]")
        for k, v in scalars.items():
            lines.append(f"{_tkey(k)} = {_tval(v)}")
        if path and (scalars or not subs):
            lines.append("")
        for k, v in subs.items():
            emit(v, path + [k])

    emit(data, [])
    return "\n".join(lines).rstrip() + "\n"


def _tkey(k: str) -> str:
    return k if k.replace("_", "").replace("-", "").isalnum() else _tval(k)


def _tval(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if isinstance(v, list):
        return "[" + ", ".join(_tval(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_tkey(k)} = {_tval(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def dumps_job(job: Job) -> str:
    return dumps_toml(job_to_dict(job))
