"""A trained policy outside the job: load any checkpoint (step_*.pt, latest.pt,
best.pt) into its algorithm, and export the deterministic policy, observation
normalisation included, as a standalone TorchScript or ONNX file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..checkpoint import load
from ..config import Job, loads_job
from ..envs.make import EnvSpec, env_spec
from ..normalize import ObsNorm, obs_norm
from ..policy.evaluate import policy_input


@dataclass
class LoadedPolicy:
    """A checkpoint's job, env spec, algorithm (params loaded) and obs statistics."""

    job: Job
    spec: EnvSpec
    algo: object
    rms: ObsNorm | None
    meta: dict

    def actions(self, obs, deterministic: bool = True, state=None):
        """Env actions for a batch of raw observations (the mode, or sampled); a
        recurrent policy takes `state` = (states [B, S], episode starts [B]) and
        returns (actions, next states)."""
        o = policy_input(obs, self.spec, self.rms, self.job.environment.clip_obs)
        if state is None:
            a, _ = self.algo.act(o, deterministic=deterministic)
            return self.algo.env_action(a)
        a, ex = self.algo.act(o, deterministic=deterministic, state=state)
        return self.algo.env_action(a), ex["rnn_state"]


def load_policy(path: str | Path) -> LoadedPolicy:
    """Rebuild the policy a checkpoint holds (loaded with weights_only=True)."""
    from ..algos import make_algorithm

    state = load(path)
    if "job" not in state or "policy" not in state:
        raise ValueError(f"{path}: not a verl-zmq checkpoint (no job or policy)")
    job = loads_job(state["job"], f"{path}:job")
    spec = env_spec(job.environment)
    algo = make_algorithm(job, spec)
    algo.load_policy_arrays({k: v.numpy() for k, v in state["policy"].items()})
    rms = None
    if job.environment.normalize_obs:
        rms = obs_norm(spec)
        rms.load_arrays({k: v.numpy() for k, v in state.get("rms", {}).items()})
    meta = {k: state[k] for k in ("env_steps", "version", "eval_return_mean") if k in state}
    return LoadedPolicy(job, spec, algo, rms, meta)


class DeterministicPolicy(nn.Module):
    """Raw observations [B, *obs_shape] -> env actions: normalise, the algorithm's
    head, then argmax / clip / squash to the action bounds."""

    def __init__(self, lp: LoadedPolicy):
        super().__init__()
        head, kind = lp.algo.export_head()
        self.head = head
        self.kind = kind
        self.normalize = lp.rms is not None
        shape = lp.spec.obs_shape
        mean = lp.rms.mean if lp.rms is not None else np.zeros(shape)
        var = lp.rms.var if lp.rms is not None else np.ones(shape)
        # float64 like the samplers' numpy normalisation, so exported actions match theirs
        self.register_buffer("mean", torch.as_tensor(mean, dtype=torch.float64))
        self.register_buffer("std", torch.as_tensor(np.sqrt(var + 1e-8), dtype=torch.float64))
        self.clip = float(lp.job.environment.clip_obs)
        self.images = lp.job.algorithm.policy.encoder != "mlp"  # the encoder takes [B, H, W, C]
        n = max(1, lp.spec.n_actions) if not lp.spec.discrete else 1
        low = np.asarray(lp.spec.action_low if not lp.spec.discrete else [0.0] * n, np.float32)
        high = np.asarray(lp.spec.action_high if not lp.spec.discrete else [0.0] * n, np.float32)
        self.n_actions = lp.spec.n_actions
        self.register_buffer("low", torch.as_tensor(low))
        self.register_buffer("high", torch.as_tensor(high))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.float()
        if self.normalize:
            x = torch.clamp((x.double() - self.mean) / self.std, -self.clip, self.clip).float()
        out = self.head(x if self.images else x.flatten(1))
        if self.kind == "argmax":
            return out.argmax(-1)
        if self.kind == "clip":
            return torch.maximum(torch.minimum(out, self.high), self.low)
        mu = out[:, : self.n_actions]
        return self.low + (torch.tanh(mu) + 1.0) * 0.5 * (self.high - self.low)


def export(path: str | Path, fmt: str, out: str | Path) -> Path:
    """Write the deterministic policy of checkpoint `path` as TorchScript or ONNX."""
    lp = load_policy(path)
    module = DeterministicPolicy(lp).eval()
    example = torch.zeros((1, *lp.spec.obs_shape), dtype=torch.float32)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        if fmt == "torchscript":
            torch.jit.save(torch.jit.trace(module, example), str(out))
        elif fmt == "onnx":
            batch = torch.export.Dim("batch", min=1)
            torch.onnx.export(module, (example,), str(out), input_names=["obs"],
                              output_names=["action"], dynamic_shapes={"obs": {0: batch}},
                              dynamo=True, verbose=False)
        else:
            raise ValueError(f"unknown format {fmt!r} (torchscript, onnx)")
    return out
