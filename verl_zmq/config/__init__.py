"""Job files: TOML loaded into frozen dataclasses, one per section.

Every key has a type and a default; unknown keys, wrong types and bad values
fail at load with the file, the dotted key, what was expected and, for
misspelt keys, a did-you-mean. Imports nothing heavy (the launcher uses it).
`sections` holds the dataclasses (`deployment` those of `[launch]`, `[resources]` and
`[security]`; `algo_params` those of `[algorithm.params]`),
`loading` reads and converts them, `checks` the semantic checks, `writing` the
TOML writer.
"""

from .algo_params import DAPOParams, DQNParams, GRPOParams, Params, PPOParams, SACParams
from .algorithms import ALGO_PARAMS, ALGORITHMS, NAMES, Row, Traits
from .deployment import K8s, Launch, RayTarget, Resources, RoleResources, Security
from .loading import apply_override, build_job, load_job, loads_job, parse_override
from .multiagent import AgentPolicy, League, MultiAgent
from .sections import (
    REQUIRED_SECTIONS,
    Algorithm,
    BehaviourCloning,
    Checkpoint,
    ConfigError,
    Environment,
    Evaluation,
    Experiment,
    Gossip,
    Job,
    Logging,
    Policy,
    Replay,
    Sampling,
    Training,
)
from .writing import dumps_job, dumps_toml, job_to_dict, toml_value

__all__ = [
    "AgentPolicy", "League", "MultiAgent",
    "ALGO_PARAMS", "ALGORITHMS", "NAMES", "Params", "Row", "Traits", "REQUIRED_SECTIONS",
    "Algorithm", "BehaviourCloning", "Checkpoint", "ConfigError", "DAPOParams", "DQNParams",
    "Environment", "Evaluation", "Experiment", "GRPOParams", "Gossip", "Job", "K8s", "Launch",
    "Logging", "PPOParams", "Policy", "RayTarget", "Replay", "Resources", "RoleResources",
    "SACParams", "Sampling", "Security", "Training", "toml_value", "apply_override", "build_job",
    "dumps_job", "dumps_toml", "job_to_dict", "load_job", "loads_job", "parse_override"
]
