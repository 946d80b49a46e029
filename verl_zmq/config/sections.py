"""The job file's sections: one frozen, typed dataclass each, every key with a
default; the comment beside a key is its reference note (tools/gen_reference.py)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from .algo_params import Params, PPOParams
from .algorithms import Traits, traits
from .deployment import Launch, Resources, Security
from .multiagent import MultiAgent
from .observing import Logging as Logging  # re-exported: the section list's home


def ceil_div(a: int, b: int) -> int:
    """a / b rounded up, for positive b (a b below 1 counts as 1)."""
    return -(-a // max(1, b))


class ConfigError(Exception):
    """A job file (or an override) that cannot be used; the message says where and why."""


@dataclass(frozen=True)
class Experiment:
    """Who the run is: its name (the run folder), its seed, where runs go."""

    name: str = "verl"  # the run folder is runs_dir/name/<stamp>
    seed: int = 0  # seeds envs (with sampler and env index), networks, evaluation
    runs_dir: str = "runs"  # where run folders go (relative to the folder launched from)
    # "auto" (verl's trainer.resume_mode): a launch continues the newest run of this
    # job under runs_dir that has a checkpoint, else starts a new one; "disable": new
    resume_mode: Literal["disable", "auto"] = "disable"
    project: str = ""  # MLflow's experiment, W&B's project; "": the name
    tags: list[str] = field(default_factory=list)  # on the tracked run (MLflow, W&B)
    # runs that repeat bit for bit (same seed, same job): samplers act in lock-step
    # with the learner's versions, the learner takes fragments in a fixed order, one
    # torch thread each with deterministic algorithms (docs/guides/reproducibility.md)
    deterministic: bool = False


@dataclass(frozen=True)
class Environment:
    """The gymnasium env every sampler and the evaluator build."""

    id: str = "CartPole-v1"  # a registered gymnasium id, or module:Class
    kwargs: dict[str, Any] = field(default_factory=dict)  # passed to gymnasium.make
    max_episode_steps: int = 0  # 0: the env's own limit
    # auto: native if any; threads: a vector step's envs at once (envs that wait)
    vectorization: Literal["auto", "native", "sync", "threads"] = "auto"
    normalize_obs: bool = False  # running mean/std, merged by the learner, sent with params
    clip_obs: float = 10.0  # normalised observations are clipped to +-clip_obs
    # on-policy learners: rewards divided by the running std of discounted returns
    normalize_reward: bool = False
    clip_reward: float = 10.0  # scaled rewards are clipped to +-clip_reward
    reward_fn: str = ""  # "module:function" applied to (obs, action, reward, next_obs)
    record_video: str = ""  # evaluator: folder for videos of its first eval episode
    step_timeout_s: float = 0.0  # > 0: envs step in worker processes; a slower step is a hang
    max_env_failures: int = 10  # hangs or raises before a sampler gives up (exit 1)
    # "atari": no-op reset, frame skip 4 (max-pooled), 84x84 grayscale, 4 frames
    # stacked; for training only, life loss ends episodes and rewards are clipped
    preset: Literal["", "atari"] = ""
    frame_stack: int = 0  # stack the last N image frames on the channel axis; 0: off
    # gymnasium wrappers applied in order around every env (samplers and evaluator
    # alike): "module:Wrapper" or {wrapper = "module:Wrapper", kwargs = {...}}
    wrappers: list[str | dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Sampling:
    """Samplers: how many, how many envs each, fragment shape, param syncing."""

    num_workers: int = 4  # sampler processes (per peer in DAPO)
    num_envs_per_worker: int = 2  # envs stepped as one vector env by each sampler
    mode: Literal["async", "sync"] = "async"  # sync: wait for new params after each fragment
    fragment_length: int = 64  # T: vector steps per fragment (T x E env steps)
    sync_interval_steps: int = 20  # swap in new params at most every this many env steps
    max_fragments_ahead: int = 2  # fragments per policy version, when not paced by lead
    # async, on-policy: pace samplers to the learner (pacing.py): ship this sampler's
    # share of each update's batch plus this many updates of lead; 0: max_fragments_ahead
    lead_updates: int = 1  # updates of lead over the learner; 0: max_fragments_ahead
    torch_threads: int = 1  # torch threads per sampler (resources.sampler.cpu wins)
    # the policy copy: numpy for the built-in MLPs (no torch in samplers), or torch
    inference: Literal["auto", "numpy", "torch"] = "auto"
    # where a torch policy copy acts: cpu, cuda (cuda:N) or auto; a GPU serves samplers
    # that generate with a Hugging Face model (they see the host's GPUs, shared)
    device: str = "cpu"


@dataclass(frozen=True)
class Replay:
    """Replay shards: FIFO for on-policy, uniform/prioritized for off-policy."""

    # "auto": what the algorithm needs (fifo for on-policy ppo, dapo and grpo; uniform
    # for off-policy dqn and sac)
    mode: Literal["auto", "fifo", "uniform", "prioritized"] = "auto"
    capacity: int = 100_000  # transitions per shard
    when_full: Literal["block", "drop_oldest"] = "block"  # block: samplers wait (backpressure)
    alpha: float = 0.6  # prioritized: how strongly priorities shape sampling (0: uniform)
    beta: float = 0.4  # prioritized: importance-weight exponent at the start, annealed to 1
    beta_anneal_steps: int = 100_000  # env steps over which beta rises to 1
    priority_eps: float = 1e-6  # added to |TD error| so no transition has priority 0
    samples_per_insert: float = 0.0  # 0: no replay-ratio limiter
    min_size_to_sample: int = 1_000  # transitions a shard holds before it serves a batch
    # the replay-ratio limiter's slack: samples per insert may stray this far from
    # samples_per_insert before sampling or inserting waits (Reverb's error_buffer)
    error_buffer: float = 0.0
    # a snapshot of the buffer every so often (and on stop), so a shard killed with -9
    # comes back with what it held but one interval's inserts; 0: only on stop. A
    # snapshot that takes long stretches the interval: writing stays under
    # `snapshot_max_share` of the shard's time
    snapshot_interval_s: float = 30.0  # a buffer snapshot this often; 0: only on stop
    snapshot_max_share: float = 0.05  # of the shard's time spent writing, at most
    # a write-ahead log of every insert between snapshots (replay/wal.py), written
    # and fsync'd together this often: a shard killed with -9 comes back with all
    # but this long's inserts; 0: no log (a killed shard loses what came since its
    # last snapshot). Uniform and prioritized shards: FIFO shards keep nothing
    wal_interval_s: float = 0.5


@dataclass(frozen=True)
class Policy:
    """Network shape shared by the algorithm's networks."""

    # "mlp" for vector observations; "transformer": a causal transformer over token
    # observations (sequence tasks), its value head on the same trunk when shared_trunk
    # "hf": a Hugging Face causal LM answering prompt files (seq/hf.py, verl/Prompts-v0)
    kind: Literal["mlp", "transformer", "hf"] = "mlp"
    # image observations: a convolutional encoder before the heads (policy/cnn.py)
    encoder: Literal["mlp", "nature_cnn", "impala_cnn"] = "mlp"
    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64])  # MLP layer widths
    activation: Literal["tanh", "relu"] = "tanh"  # of the hidden layers
    shared_trunk: bool = False  # actor and critic share their hidden layers
    d_model: int = 64  # transformer: width, layers, attention heads
    n_layers: int = 2  # transformer layers
    n_heads: int = 4  # transformer attention heads
    log_std_init: float = 0.0  # Box actions: the Gaussian's initial log standard deviation
    dueling: bool = False  # dqn: a dueling head (value and advantage streams)
    # a network of your own (ppo, dapo): "module:factory", factory(spec, policy) -> a
    # torch module whose forward(obs) gives (the policy head's output [B, spec.n_actions],
    # the value [B]); samplers then act with it in torch (docs/guides/extending.md)
    network: str = ""
    # memory (ppo, dapo): an LSTM or GRU core after the encoder; samplers carry its
    # state per env and ship each fragment's initial state
    recurrent: Literal["", "lstm", "gru"] = ""
    recurrent_size: int = 64  # the LSTM or GRU state's width
    # kind = "hf": a local model folder, or an inline config (`model_type` and its
    # sizes: a model built with random weights); the tokenizer a folder, "chars"
    # (built in), or "" for the model folder's own
    path: str = ""
    config: dict[str, Any] = field(default_factory=dict)  # kind = "hf": a model of this config
    tokenizer: str = ""  # kind = "hf": a folder, "chars", or "" for the model's own
    # LoRA (peft): adapters of this rank on `target_modules`; samplers receive the
    # adapters only, and the reference is the model with its adapters disabled
    lora_rank: int = 0
    lora_alpha: int = 16  # LoRA scaling: the adapters' output times lora_alpha / lora_rank
    # modules given adapters (names as the model calls them), or "all-linear" (verl's
    # default: every linear layer but the output head)
    target_modules: list[str] | str = field(default_factory=lambda: ["q_proj", "v_proj"])
    # kind = "hf": recompute activations in the backward pass (verl's
    # enable_gradient_checkpointing): less memory for a second forward's time
    gradient_checkpointing: bool = False
    # kind = "hf": the weights' dtype on the learner and the samplers ("bfloat16":
    # half the memory, and parameters travel to samplers as bfloat16)
    dtype: Literal["float32", "bfloat16"] = "float32"


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

    # one of the algorithm table's names (config/algorithms.py: ppo, dapo, grpo, dqn,
    # sac); it chooses [algorithm.params]
    name: str = "ppo"
    params: Params = field(default_factory=PPOParams)  # the dataclass `name` chooses
    policy: Policy = field(default_factory=Policy)
    bc: BehaviourCloning = field(default_factory=BehaviourCloning)
    # a checkpoint (best.pt, or `verl sft`'s output) whose policy is the initial policy
    # and, for algorithms with a KL term, the frozen reference; read where the policy is built
    init_from: str = ""


@dataclass(frozen=True)
class Training:
    """The learner: budget, param publishing, staleness, prefetch, device."""

    total_timesteps: int = 100_000  # env steps, dropped fragments included
    sync_interval_updates: int = 1  # publish params every this many updates
    max_policy_lag: int = 4  # on-policy: drop fragments this many updates older
    prefetch: int = 4  # fragments requested beyond one batch, per shard
    device: str = "cpu"  # cpu, cuda (cuda:N) or auto: a GPU where the learner has one
    amp: Literal["none", "bf16"] = "none"  # bf16: autocast forward passes and losses
    torch_threads: int = 1  # resources.learner.cpu wins
    learn: bool = True  # false: drain batches without updating (pipeline benchmarks)
    update_delay_s: float = 0.0  # sleep after each update: a learner slowed on purpose (soak)
    stop_at_episode_return: float | None = None  # end at this last-100-episode training mean
    num_learners: int = 1  # data parallel: processes (torch.distributed), gradients all-reduced
    learner_timeout_s: float = 60.0  # a rendezvous or collective waits at most this
    # updates in a row whose loss or gradient is NaN or infinite (each one skipped, the
    # weights kept) before the learner ends the job with the cause; 0: never
    max_nonfinite_updates: int = 20


@dataclass(frozen=True)
class Evaluation:
    """The evaluator: cadence in env steps, episodes, its own seed, early stop."""

    interval_steps: int = 10_000  # evaluate params every this many env steps
    n_eval_episodes: int = 10  # run at once, one env each
    seed: int = 1_000_003  # episode i is seeded seed + i, apart from training envs
    deterministic: bool = True  # the policy's mode, not a sample
    stop_at_return: float | None = None  # stop the job once an eval reaches it
    # evaluate the params training starts from (verl's val_before_train); false: first at
    before_training: bool = True  # interval_steps, the job's first seconds to training
    # a new best is evaluated again on other episode seeds, and best.pt is kept on
    # that second evaluation alone: the first picked the candidate for being high,
    # so it is biased upwards; one lucky set of episodes does not make the best model
    confirm_best: bool = True
    confirm_episodes: int = 0  # episodes of the second evaluation; 0: 3 x n_eval_episodes
    # merged over environment.kwargs for evaluation episodes only (held-out prompts,
    # a task's exact-match score)
    env_kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def confirm_count(self) -> int:
        """Episodes of a best-model candidate's second evaluation."""
        return self.confirm_episodes or 3 * self.n_eval_episodes


@dataclass(frozen=True)
class Checkpoint:
    """Learner checkpoints: cadence in env steps and how many to keep."""

    interval_steps: int = 50_000  # learner writes checkpoints/step_<n>.pt this often
    keep: int = 3  # step checkpoints kept (latest.pt and best.pt besides)
    min_free_mb: int = 64  # below this much free disk a periodic checkpoint is skipped; 0: off
    # latest.pt alone (what a restarted learner resumes from) after the first update
    # and this often, so a killed learner loses at most this much training; 0: off.
    snapshot_interval_s: float = 2.0  # a slow write stretches it: writing < 5% of the time


@dataclass(frozen=True)
class Gossip:
    """Decentralised peers: neighbour choice, async mixing, compression."""

    # async (the default): neighbours each gradient is pushed to; pull mixing: neighbours
    # exchanged with per round
    neighbor_count: int = 2
    update_interval: int = 5  # async, pull mixing: local updates between two exchanges
    # async, pull mixing: how neighbours are chosen (random, by recent reward, or by topology)
    selection_strategy: Literal["random", "reward_based", "topology"] = "random"
    # selection_strategy = "topology" (and the rounds beyond 8 peers): the graph
    topology: Literal["ring", "exponential"] = "ring"
    temperature: float = 1.0  # reward_based selection and reward_softmax mixing: softmax's
    # async, pull mixing: received gradients (async) and parameters kept, best first
    max_queue_size: int = 8
    # async, pull mixing: the queues' order: "reward", "recency" or a module:function
    # (parameters only)
    priority_fn: str = "reward"
    sync_interval: int = 5  # updates between two parameter mixes (rounds, or the queue's)
    # async: batches (or gradients: share) pushed to neighbor_count neighbours, no barrier,
    # training with what has arrived, and parameter pulls and mixes;
    # gradients: average every minibatch's gradient with all neighbours in rounds that
    # wait (DD-PPO: bit-identical peers), and parameters as "exact" does; exact: every
    # sync_interval updates, average parameters with all neighbours (rounds); uniform,
    # reward_softmax: parameter pulls alone, mixed uniformly or by reward
    mixing: Literal["async", "gradients", "exact", "uniform",
                    "reward_softmax"] = "async"  # what is averaged, how
    # async: what goes to neighbor_count neighbours: "experience" (each update's batch,
    # trained on beside theirs) or "gradients" (each backward pass's, mixed into a step)
    share: Literal["experience", "gradients"] = "experience"
    # async: a gradient that waited through more of our updates, or a batch further behind
    # its sender's newest batch, is dropped
    grad_staleness: int = 2

    round_deadline_s: float = 0.0  # gradients, exact: a round waits this long; 0: heartbeats
    share_batch: bool = True  # batch, steps and eval interval are the group's: 1/peers each
    # async, pull mixing: a in theta <- (1 - a) theta + a sum_j w_j theta_j
    mix_rate: float = 0.5
    # async, pull mixing: received parameters older than this many updates are not mixed
    # in, and a peer that fell this far further behind a neighbour since its last mix
    # adopts the neighbour's params instead
    staleness_updates: int = 50
    # what travels: gradients, parameter changes (pulls) and batches (experience), in fp16,
    # 2-bit ternary, top-k, 1-bit signs (gradients only); batches then 8-bit (not fp16)
    compression: Literal["none", "fp16", "terngrad", "sign", "topk_delta"] = "none"
    topk_fraction: float = 0.05  # compression = "topk_delta": the share of entries sent


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
    multiagent: MultiAgent = field(default_factory=MultiAgent)

    @property
    def registry_port(self) -> int:
        return self.launch.registry_port or self.launch.port_range[0]

    @property
    def traits(self) -> Traits:
        """What the job's algorithm declares (on-policy, extras, decentralised)."""
        t = traits(self.algorithm.name)
        pol = self.algorithm.policy
        if pol.kind != "mlp" or pol.encoder != "mlp" or pol.network:  # no numpy forward pass
            t = dataclasses.replace(t, numpy_actor="")
        return t

    @property
    def fragment_steps(self) -> int:
        return self.sampling.fragment_length * self.sampling.num_envs_per_worker

    @property
    def fragments_per_batch(self) -> int:
        """Fragments one on-policy update consumes: ceil(batch_size / fragment_steps)."""
        return ceil_div(self.algorithm.params.batch_size, self.fragment_steps)

    def learner_view(self) -> Job:
        """What one of `training.num_learners` data-parallel learners updates on: its
        share of the batch and minibatch (the gradients it averages make them the
        group's again). No fragments are prefetched beyond a rank's share: paced
        samplers ship one batch for the group, and a rank holding more than its
        share would leave another waiting for fragments nobody ships."""
        k = self.training.num_learners
        if k <= 1:
            return self
        p, r = self.algorithm.params, dataclasses.replace
        params = r(p, batch_size=ceil_div(p.batch_size, k))
        if hasattr(p, "minibatch_size"):
            params = r(params, minibatch_size=ceil_div(p.minibatch_size, k))
        # off-policy ranks each request sampled batches of their share, prefetched
        prefetch = 0 if self.traits.on_policy else self.training.prefetch
        return r(self, algorithm=r(self.algorithm, params=params),
                 training=r(self.training, prefetch=prefetch))

    def policy_view(self, policy: str) -> Job:
        """What one policy of a multi-agent job trains with: `algorithm.params` with
        the keys its `[multiagent.policies.NAME.params]` changes, and its budget."""
        pol = self.multiagent.policy(policy)
        r = dataclasses.replace
        job = self
        if pol.params:
            job = r(job, algorithm=r(job.algorithm, params=r(job.algorithm.params, **pol.params)))
        if pol.total_timesteps:
            job = r(job, training=r(job.training, total_timesteps=pol.total_timesteps))
        return job

    def peer_view(self) -> Job:
        """What one gossip peer, its samplers and the evaluator run: with
        `gossip.share_batch` the job's batch, minibatch, total env steps and
        evaluation interval are the whole group's (what one learner would use), and
        each of `launch.peers` peers takes its share: its schedules then run on the
        group's progress, and evaluations come as often as one learner's. A fragment
        bigger than a peer's batch would make the batch a whole fragment: the peer's
        samplers then run fewer envs (fragment length kept: the same GAE horizon)."""
        k = self.launch.peers
        if not (self.gossip.share_batch and self.traits.decentralised and k > 1):
            return self
        p, r, s = self.algorithm.params, dataclasses.replace, self.sampling
        if not isinstance(p, PPOParams):  # (the decentralised learners: the PG family)
            return self
        share = ceil_div(p.batch_size, k)
        envs = s.num_envs_per_worker
        if s.fragment_length * envs > share:
            envs = max(1, share // s.fragment_length)
        return r(self, algorithm=r(self.algorithm, params=r(
            p, batch_size=share, minibatch_size=ceil_div(p.minibatch_size, k))),
            sampling=r(s, num_envs_per_worker=envs),
            training=r(self.training,
                       total_timesteps=ceil_div(self.training.total_timesteps, k)),
            evaluation=r(self.evaluation,
                         interval_steps=ceil_div(self.evaluation.interval_steps, k)))
