"""What a job means, checked once its types are right: positive counts and
periods, consistent sizes, configurations that would deadlock."""

from __future__ import annotations

import dataclasses
import math

from .algo_params import PPOParams
from .roles import ROLES
from .sections import ConfigError, Job


def _positive(source: str, pairs: list[tuple[str, float]]) -> None:
    for key, v in pairs:
        if not (v > 0) or (isinstance(v, float) and math.isinf(v)):
            raise ConfigError(f"{source}: {key}: expected a positive number, got {v!r}")


def check_semantics(job: Job, source: str) -> None:
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
        ("training.num_learners", tr.num_learners),
        ("training.learner_timeout_s", tr.learner_timeout_s),
        ("replay.capacity", job.replay.capacity),
        ("launch.heartbeat_interval_s", lr.heartbeat_interval_s),
        ("launch.heartbeat_liveness", lr.heartbeat_liveness),
        ("launch.restart_window_s", lr.restart_window_s),
        ("launch.ray.start_timeout_s", lr.ray.start_timeout_s),
        ("logging.interval_s", job.logging.interval_s),
        ("evaluation.interval_steps", job.evaluation.interval_steps),
        ("evaluation.n_eval_episodes", job.evaluation.n_eval_episodes),
        ("checkpoint.interval_steps", job.checkpoint.interval_steps),
    ])
    if tr.max_nonfinite_updates < 0:
        raise ConfigError(f"{source}: training.max_nonfinite_updates: expected 0 (never end "
                          f"the job) or a positive number of updates, got "
                          f"{tr.max_nonfinite_updates!r}")
    if job.evaluation.confirm_episodes < 0:
        raise ConfigError(f"{source}: evaluation.confirm_episodes: expected 0 (3 x "
                          f"n_eval_episodes) or a positive number of episodes, got "
                          f"{job.evaluation.confirm_episodes!r}")
    _check_wrappers(job, source)
    _check_launch(job, source)
    _check_learners(job, source)
    _check_replay(job, source)
    _check_algorithm(job, source)
    _check_resources(job, source)
    _check_multiagent(job, source)
    _check_gossip(job, source)
    _check_tracking(job, source)
    _check_deterministic(job, source)


def _check_deterministic(job: Job, source: str) -> None:
    """What `experiment.deterministic` cannot repeat, named before anything starts."""
    if not job.experiment.deterministic:
        return
    t, S, T = job.traits, job.sampling, job.training
    why = ""
    if not t.on_policy or t.decentralised or job.multiagent.policies:
        why = ("it repeats single-agent on-policy jobs with one learner (PPO, APPO, GRPO); "
               "off-policy replay, DAPO's gossip and multi-agent jobs are not repeatable")
    elif T.num_learners != 1 or job.launch.learners != 1:
        why = "data-parallel learners reduce gradients in arrival order: use one learner"
    elif T.sync_interval_updates != 1:
        why = "samplers must see every version: set training.sync_interval_updates = 1"
    elif job.algorithm.policy.kind == "hf":
        why = "Hugging Face models generate with kernels that do not repeat"
    elif job.fragments_per_batch % S.num_workers:
        why = (f"an update takes {job.fragments_per_batch} fragments, which "
               f"sampling.num_workers = {S.num_workers} samplers cannot share equally: make "
               f"algorithm.params.batch_size a multiple of num_workers x fragment_length x "
               f"num_envs_per_worker ({S.num_workers * job.fragment_steps})")
    if why:
        raise ConfigError(f"{source}: experiment.deterministic: {why}")


TRACKING = ("tensorboard", "mlflow", "wandb")


def _check_tracking(job: Job, source: str) -> None:
    """logging.backends: known names (whether the launcher's host has the packages is
    its own check, `ops.checks.tracking_problems`: roles never import them)."""
    for b in job.logging.backends:
        if b not in TRACKING:
            raise ConfigError(f"{source}: logging.backends: {b!r} is not a backend (choose "
                              f"from {', '.join(TRACKING)})")
    bad = [t for t in job.experiment.tags if not isinstance(t, str) or not t.strip()]
    if bad:
        raise ConfigError(f"{source}: experiment.tags: expected a list of non-empty strings, "
                          f"got {bad[0]!r}")


# the [gossip] keys each mixing mode reads (share_batch: every mode); a key set to
# other than its default where the mode does not read it is refused, naming the
# modes that do
_PULL = ("neighbor_count", "update_interval", "selection_strategy", "topology",
         "temperature", "max_queue_size", "priority_fn", "sync_interval", "mix_rate",
         "staleness_updates", "compression", "topk_fraction")
GOSSIP_READS: dict[str, tuple[str, ...]] = {
    "async": (*_PULL, "grad_staleness", "share"),
    "gradients": ("sync_interval", "round_deadline_s", "topology"),
    "exact": ("sync_interval", "round_deadline_s", "topology"),
    "uniform": _PULL,
    "reward_softmax": _PULL,
}


def _changed(section: object) -> list[str]:
    """The keys of a section (a dataclass) set to other than their defaults."""
    default = type(section)()
    return [f.name for f in dataclasses.fields(section)  # type: ignore[arg-type]
            if getattr(section, f.name) != getattr(default, f.name)]


def _check_gossip(job: Job, source: str) -> None:
    g = job.gossip
    changed = [k for k in _changed(g) if k not in ("mixing", "share_batch")]
    if not job.traits.decentralised:
        return  # the section is read by decentralised peers alone
    reads = GOSSIP_READS[g.mixing]
    for key in changed:
        if key not in reads:
            modes = [m for m, keys in GOSSIP_READS.items() if key in keys]
            raise ConfigError(f"{source}: gossip.{key}: gossip.mixing = {g.mixing!r} does not "
                              f"read it (it is read by mixing = "
                              f"{' or '.join(repr(m) for m in modes)}); remove it or change "
                              f"gossip.mixing")
    if g.mixing == "async" and g.share == "experience" and g.compression == "sign":
        raise ConfigError(f"{source}: gossip.compression: \"sign\" compresses gradients, and "
                          f"with gossip.share = \"experience\" none travel (parameters do: "
                          f"use \"fp16\", \"terngrad\" or \"topk_delta\"), or set "
                          f"gossip.share = \"gradients\"")
    if g.compression == "topk_delta" or "topk_fraction" not in changed:
        return
    raise ConfigError(f"{source}: gossip.topk_fraction: read with compression = "
                      f"\"topk_delta\" alone")


def _check_multiagent(job: Job, source: str) -> None:
    from .multiagent import multiagent_problems

    ma = job.multiagent
    problems = multiagent_problems(ma)
    own = {f.name for f in dataclasses.fields(job.algorithm.params)}
    for name, pol in ma.policies.items():
        odd = [k for k in pol.params if k not in own]
        if odd:
            problems.append(f"multiagent.policies.{name}.params: {', '.join(odd)} are not "
                            f"{job.algorithm.name}'s [algorithm.params] keys")
    if len(ma.trained) > 1 and job.training.num_learners > 1:
        problems.append("multiagent: several trained policies each have a learner of their "
                        "own; training.num_learners takes one")
    if len(ma.trained) > 1 and job.traits.decentralised and job.launch.peers != len(ma.trained):
        problems.append(f"launch.peers = {job.launch.peers}: a decentralised multi-agent job "
                        f"runs one peer per trained policy; set launch.peers = "
                        f"{len(ma.trained)} (policies: {', '.join(ma.trained)})")
    if problems:
        raise ConfigError(f"{source}: {problems[0]}")


def _check_wrappers(job: Job, source: str) -> None:
    """Each of environment.wrappers: "module:Wrapper" or a table with `wrapper` (that
    string) and optional `kwargs` (a table); imported only where envs are built."""
    for i, w in enumerate(job.environment.wrappers):
        where = f"{source}: environment.wrappers[{i}]"
        if isinstance(w, dict):
            extra = set(w) - {"wrapper", "kwargs"}
            if extra or not isinstance(w.get("wrapper"), str) \
                    or not isinstance(w.get("kwargs", {}), dict):
                raise ConfigError(f"{where}: expected {{wrapper = \"module:Wrapper\", kwargs "
                                  f"= {{...}}}}, got {w!r}")
            w = w["wrapper"]
        if not isinstance(w, str) or ":" not in w:
            raise ConfigError(f"{where}: expected \"module:Wrapper\" (an import path), "
                              f"got {w!r}")


def _check_launch(job: Job, source: str) -> None:
    lr = job.launch
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
        if role not in ROLES:
            raise ConfigError(f"{source}: launch.max_restarts_per_role.{role}: not a role "
                              f"({', '.join(ROLES)})")
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ConfigError(f"{source}: launch.max_restarts_per_role.{role}: expected a "
                              f"non-negative integer, got {n!r}")
    odd = [r for r in lr.standby if r not in ROLES]
    if odd:
        raise ConfigError(f"{source}: launch.standby: {odd[0]!r} is not a role "
                          f"({', '.join(ROLES)})")
    if job.security.curve not in (True, False, "auto"):
        raise ConfigError(
            f"{source}: security.curve: expected true, false or \"auto\", "
            f"got {job.security.curve!r}"
        )


def _check_learners(job: Job, source: str) -> None:
    n = job.training.num_learners
    if n <= 1:
        return
    where = f"{source}: training.num_learners"
    if job.training.stop_at_episode_return is not None:
        raise ConfigError(f"{source}: training.stop_at_episode_return: each of {n} "
                          f"data-parallel learners sees its own episodes; stop on "
                          f"evaluation.stop_at_return instead")
    if job.traits.decentralised:
        raise ConfigError(f"{where}: {job.algorithm.name}'s peers are learners without a "
                          f"centre; set launch.peers instead")
    if job.launch.learners > 1:
        raise ConfigError(f"{where}: {n} learners are one logical learner; leave "
                          f"launch.learners at 1")


def _check_replay(job: Job, source: str) -> None:
    T = job.traits
    if job.replay.mode not in T.replay_modes:
        kind = "on-policy" if T.on_policy else "off-policy"
        want = " or ".join(f'"{m}"' for m in T.replay_modes)
        raise ConfigError(f"{source}: replay.mode: {job.algorithm.name} is {kind} and needs "
                          f"{want}, got \"{job.replay.mode}\"")
    if job.replay.capacity < job.fragment_steps:
        raise ConfigError(
            f"{source}: replay.capacity: {job.replay.capacity} transitions cannot hold one "
            f"fragment of sampling.fragment_length x sampling.num_envs_per_worker = "
            f"{job.fragment_steps}; raise replay.capacity"
        )
    R = job.replay
    if not math.isfinite(R.wal_interval_s) or R.wal_interval_s < 0:
        raise ConfigError(f"{source}: replay.wal_interval_s: {R.wal_interval_s}: seconds "
                          f"between writes of the insert log, or 0 for no log")
    if R.samples_per_insert > 0 and R.error_buffer < max(1.0, R.samples_per_insert):
        raise ConfigError(
            f"{source}: replay.error_buffer: {R.error_buffer} would let the replay-ratio "
            f"limiter block sampling and inserting at once; use at least "
            f"max(1, replay.samples_per_insert) = {max(1.0, R.samples_per_insert)}")


def _check_algorithm(job: Job, source: str) -> None:
    if job.sampling.device != "cpu" and job.algorithm.policy.kind != "hf":
        raise ConfigError(f"{source}: sampling.device = {job.sampling.device!r}: only samplers "
                          "that generate with a Hugging Face model (algorithm.policy.kind = "
                          "\"hf\") act on a GPU; env policies act on the CPU: leave it \"cpu\"")
    if job.sampling.inference == "numpy" and not job.traits.numpy_actor:
        raise ConfigError(f"{source}: sampling.inference: {job.algorithm.name} has no numpy "
                          f"policy; use \"auto\" or \"torch\"")
    bc = job.algorithm.bc
    if bc.demos and not job.traits.learns_from_demos:
        raise ConfigError(f"{source}: algorithm.bc.demos: behaviour cloning is for ppo, dapo "
                          f"and sac, not {job.algorithm.name}")
    if bc.mixing_ratio < 0 or bc.decay_steps < 0 or bc.batch_size < 1:
        raise ConfigError(f"{source}: algorithm.bc: mixing_ratio and decay_steps must be >= 0 "
                          f"and batch_size >= 1")
    p = job.algorithm.params
    for why in p.problems():
        raise ConfigError(f"{source}: {why}")
    if isinstance(p, PPOParams) and p.normalize_value and job.algorithm.policy.recurrent:
        raise ConfigError(f"{source}: algorithm.params.normalize_value: not with recurrent "
                          f"policies (algorithm.policy.recurrent); leave it false")
    if isinstance(p, PPOParams) and p.decoupled_loss and job.algorithm.policy.recurrent:
        raise ConfigError(f"{source}: algorithm.params.decoupled_loss: not with recurrent "
                          f"policies (algorithm.policy.recurrent) yet; leave it false, or "
                          f"use vtrace = true for stale fragments")
    if isinstance(p, PPOParams) and job.algorithm.policy.kind != "hf" and (
            p.behav_imp_weight_cap < 0 or p.behav_imp_weight_cap and not p.decoupled_loss):
        raise ConfigError(f"{source}: algorithm.params.behav_imp_weight_cap: a ceiling >= 0 "
                          f"on the decoupled loss's weights (decoupled_loss = true); got "
                          f"{p.behav_imp_weight_cap!r}")
    _check_hf_keys(job, source)


# [algorithm.params] keys the Hugging Face learner (seq/hf_grpo.py) does not read: a
# critic's (but with its value head, HF_CRITIC), V-trace's, the recurrent and the
# single clip range (it clips with clip_low and clip_high); the advantage's own keys
# are read by an estimator of one's own alone (the built-in grouped estimators do not)
HF_UNREAD = ("clip_range", "clip_schedule", "clip_range_vf", "vf_coef", "vtrace",
             "vtrace_rho_bar", "vtrace_c_bar", "recurrence", "normalize_value")
HF_OWN_ESTIMATOR = ("gae_lambda", "normalize_advantage")
# keys read by that learner alone (params and [algorithm.policy])
HF_ONLY = ("micro_batch_size", "max_tokens_per_forward", "lr_warmup_steps", "critic_warmup")
# read by that learner with a value head (adv_estimator = "gae": PPO) alone
HF_CRITIC = ("clip_range_vf", "vf_coef", "gae_lambda", "critic_warmup")
HF_ONLY_POLICY = ("gradient_checkpointing", "dtype")


def _check_hf_keys(job: Job, source: str) -> None:
    """Every key a job sets is read: a key the learner at hand ignores is refused."""
    p, pol = job.algorithm.params, job.algorithm.policy
    changed = set(_changed(p))
    if pol.kind != "hf":
        set_here = _changed(pol)
        for key in (k for k in HF_ONLY_POLICY if k in set_here):
            raise ConfigError(f"{source}: algorithm.policy.{key}: read for a Hugging Face "
                              f"model alone (kind = \"hf\"); remove it")
        for key in HF_ONLY:
            if key in changed:
                raise ConfigError(f"{source}: algorithm.params.{key}: read by the Hugging Face "
                                  f"learner alone (algorithm.policy.kind = \"hf\"); remove it")
        return
    unread = list(HF_UNREAD)
    # a Hugging Face policy learns with GRPO's family alone, whose params are PPO's
    if not isinstance(p, PPOParams) or ":" not in p.adv_estimator:
        unread += HF_OWN_ESTIMATOR
    critic = isinstance(p, PPOParams) and p.adv_estimator == "gae"
    unread = [k for k in unread if k not in HF_CRITIC] if critic else unread + ["critic_warmup"]
    for key in unread:
        if key in changed:
            why = ("a value head reads it: adv_estimator = \"gae\"" if key in HF_CRITIC
                   else "it clips with clip_low and clip_high" if key.startswith("clip_range")
                   or key == "clip_schedule"
                   else "it has no V-trace or recurrence"
                   if key not in HF_OWN_ESTIMATOR else
                   "the built-in estimators do not read it (an adv_estimator of your own may)")
            raise ConfigError(f"{source}: algorithm.params.{key}: the Hugging Face learner "
                              f"does not read it ({why}); remove it")


_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def memory_bytes(spec: str) -> int:
    """A memory size as bytes: a number with an optional unit K, M, G or T (binary,
    optionally followed by B or iB: "512MB", "2GiB", "4g"); ValueError otherwise."""
    s = spec.strip().lower()
    for tail in ("ib", "b"):
        if s.endswith(tail) and s[:-len(tail)][-1:] in "kmgt" and s[:-len(tail)]:
            s = s[:-len(tail)]
            break
    unit = s[-1:] if s[-1:] in "kmgt" else ""
    number = s[:-1] if unit else s
    try:
        value = float(number)
    except ValueError:
        raise ValueError(f"{spec!r} is not a size such as \"512MB\" or \"2GB\"") from None
    if not value > 0:
        raise ValueError(f"{spec!r}: a size must be positive")
    return int(value * _UNITS[unit])


def _check_resources(job: Job, source: str) -> None:
    for f in dataclasses.fields(job.resources):
        res = getattr(job.resources, f.name)
        if not 0 <= res.nice <= 19:
            raise ConfigError(f"{source}: resources.{f.name}.nice: expected 0 to 19 "
                              f"(how much lower than the other roles' CPU priority), "
                              f"got {res.nice}")
        if res.memory:
            try:
                memory_bytes(res.memory)
            except ValueError as e:
                raise ConfigError(f"{source}: resources.{f.name}.memory: {e}") from None

