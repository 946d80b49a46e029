"""The job's parts of one's own, imported and checked for what they take (what
`verl check` runs for single- and multi-agent jobs alike)."""

from __future__ import annotations

from ..config import Job


def plugin_problems(job: Job) -> list[str]:
    """The job's parts of one's own (`module:function`), imported and checked for
    what they take: an advantage estimator, a policy loss, an exploration schedule, a
    network. (An algorithm of one's own is checked where the job is read.)"""
    from ..algos.exploration import SCHEDULE
    from ..algos.shapes import SHAPES
    from ..importing import plug_in

    shapes = {"adv_estimator": SHAPES["advantage estimator"],
              "policy_loss": SHAPES["policy loss"], "exploration": (3, SCHEDULE)}
    wanted = [(job.algorithm.policy.network, "algorithm.policy.network", 2,
               "(spec: EnvSpec, policy: Policy) -> torch.nn.Module")]
    wanted += [(path, f"algorithm.params.{key}", *shapes[key])
               for key, path in job.algorithm.params.plugins().items()]
    out = []
    for path, key, takes, shape in wanted:
        if ":" in path:
            try:
                plug_in(path, key, takes, shape)
            except ValueError as e:
                out.append(str(e))
    return out
