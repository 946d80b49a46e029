"""The job file's sections on what a job says about itself as it runs: `[logging]`
(metrics cadence, log level, tracking backends, TensorBoard histograms) and its
`[logging.health]` thresholds, when a trainer or shard warns that learning goes
wrong. The comment beside a key is its reference note (tools/gen_reference.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True)
class Health:
    """When a trainer or shard says that learning goes wrong: one warning per kind,
    with its remedy, on the terminal and in summary.json (docs/guides/monitoring.md)."""

    enabled: bool = True  # false: no health warning at all (critic_flat aside)
    grace_updates: int = 20  # no warning from a trainer's first updates
    patience_updates: int = 20  # a condition holds this many updates in a row
    # discrete actions: entropy below this share of its maximum (log n) has collapsed
    entropy_collapse: float = 0.02
    entropy_stuck: float = 0.98  # ...above this share, it is stuck at its maximum
    entropy_stuck_updates: int = 100  # stuck: this many updates in a row, from the first
    # a gradient norm this many times the median of the 100 before it (3 such among
    # the last 20 updates make the warning); norms as clipped by max_grad_norm
    grad_spike: float = 10.0
    # explained variance below this on average over ev_updates (updates whose value
    # targets vary by over 5% of their size: near-constant returns explain nothing);
    # a solved task's noise leaves the best critic at about 0, so the floor is below it
    ev_floor: float = -0.2
    ev_updates: int = 50  # the window of updates ev_floor is judged over
    value_loss_growth: float = 1000.0  # value loss this many times its early median
    # policy lag that never fell over this many metrics reports (of new updates) and rose
    # by lag_rise updates (past 2): samplers get ahead of the learner without bound
    lag_reports: int = 12
    lag_rise: float = 2.0  # updates of policy lag gained over lag_reports
    stale_share: float = 0.5  # of fragments (or gossip) dropped as too old, over 10 or more
    replay_ratio_factor: float = 2.0  # samples per insert off its target by this factor
    no_signal_updates: int = 20  # post-training: updates in a row with no group's signal
    kl_max: float = 1.0  # post-training: KL to the reference above this, patience updates
    # DAPO: gradients' queue delay over 3 reports in a row. A gradient waits for its
    # receiver's update to end: on 2 cores a CartPole update takes about 25 ms, and a
    # healthy queue waits 10-20 ms (the seeds' 10 ms assumes faster updates)
    gossip_delay_ms: float = 100.0


@dataclass(frozen=True)
class Logging:
    """Metrics cadence and log level."""

    interval_s: float = 5.0  # every role logs a metrics event this often
    level: Literal["debug", "info", "warning", "error"] = "info"  # every role's log level
    # numbers from the env's `info` charted per episode (the value where an episode ends,
    # averaged over episodes): samplers' `sampler/info/<key>`, the evaluator's `eval/<key>`
    info_keys: list[str] = field(default_factory=lambda: ["is_success"])
    # where the launcher sends metrics, keys and the run's files: "tensorboard" (tb/),
    # "mlflow", "wandb" (the `tracking` extra; docs/guides/tracking.md)
    backends: list[str] = field(default_factory=lambda: ["tensorboard"])
    mlflow_uri: str = ""  # "": $MLFLOW_TRACKING_URI, else sqlite in the run folder
    # "offline": written to the run folder's wandb/, uploaded later with `wandb sync`
    wandb_mode: Literal["offline", "online"] = "offline"
    health: Health = field(default_factory=Health)  # warnings when learning goes wrong
    # every this many updates a learner sends TensorBoard histograms of its batch's
    # actions, its advantages and its weights, with each weight array's norm; 0: never
    histograms_interval: int = 0
