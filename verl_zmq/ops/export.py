"""A trained policy outside the job: load any checkpoint (step_*.pt, latest.pt,
best.pt) into its algorithm, and export the deterministic policy, observation
normalisation included, as a standalone TorchScript or ONNX file (a Hugging Face
policy as a model folder)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..checkpoint import load
from ..config import Job, loads_job
from ..envs.make import env_spec
from ..envs.spec import EnvSpec
from ..normalize import ObsNorm, obs_norm
from ..policy.encoders import ObsEncoder
from ..policy.evaluate import policy_input
from ..policy.net import PolicyHead


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


def checkpoint_policy(job: Job, path: str | Path, policy: str = "") -> str:
    """Which policy of a multi-agent job a checkpoint holds: `policy` where given,
    else the folder it lies in (checkpoints/<policy>/ where several train), else
    the first trained one; ValueError for a name that is not a policy."""
    ma = job.multiagent
    if policy:
        if policy not in ma.names:
            raise ValueError(f"--policy {policy!r}: the job's policies are "
                             f"{', '.join(ma.names)}")
        return policy
    folder = Path(path).parent.name
    return folder if folder in ma.trained else ma.trained[0]


def load_policy(path: str | Path, policy: str = "") -> LoadedPolicy:
    """Rebuild the policy a checkpoint holds (loaded with weights_only=True); of a
    multi-agent job, one policy (`checkpoint_policy`), with the spaces it acts in."""
    from ..algos import make_algorithm
    from ..envs.agents import is_multiagent, policy_spec

    state = load(path)
    if "job" not in state or "policy" not in state:
        raise ValueError(f"{path}: not a verl-zmq checkpoint (no job or policy)")
    job = loads_job(state["job"], f"{path}:job")
    name = ""
    if is_multiagent(job.environment):
        name = checkpoint_policy(job, path, policy)
        spec = policy_spec(job.environment, job.multiagent, name)
        job = job.policy_view(name)
    else:
        spec = env_spec(job.environment)
    algo = make_algorithm(job, spec)
    algo.load_policy_arrays({k: v.numpy() for k, v in state["policy"].items()})
    rms = None
    if job.environment.normalize_obs:
        rms = obs_norm(spec)
        rms.load_arrays({k: v.numpy() for k, v in state.get("rms", {}).items()})
    meta = {k: state[k] for k in ("env_steps", "version", "eval_return_mean") if k in state}
    if name:
        meta["policy"] = name
    return LoadedPolicy(job, spec, algo, rms, meta)


class DeterministicPolicy(nn.Module):
    """Raw observations -> env actions: normalise, the algorithm's head, then argmax
    / clip / squash to the action bounds (per part for MultiDiscrete, the sign of
    each logit for MultiBinary). Inputs are the observation's columns in leaf
    order (one, `obs`, for a plain observation) and, for a recurrent policy, the
    state [B, S] (zeros where an episode starts); a recurrent policy returns
    (actions, next state)."""

    def __init__(self, lp: LoadedPolicy):
        super().__init__()
        head, kind = lp.algo.export_head()
        self.head = head
        self.kind = kind
        # heads of flat features (DQN's, SAC's) take a structured observation's features
        self.featurize = ObsEncoder(lp.spec, lp.job.algorithm.policy) \
            if lp.spec.structured and not isinstance(head, PolicyHead) else None
        self.spec = lp.spec
        self.structured = lp.spec.structured
        self.columns = tuple(leaf.column for leaf in lp.spec.leaves)
        self.recurrent = int(getattr(lp.algo, "state_size", 0)) > 0
        # float64 like the samplers' numpy normalisation, so exported actions match theirs
        self.norm: list[bool] = []
        for i, leaf in enumerate(lp.spec.leaves):
            rms = lp.rms if not self.structured else (
                lp.rms.rms.get(leaf.column) if lp.rms is not None else None)  # type: ignore[union-attr]
            self.norm.append(rms is not None)
            if rms is not None:
                self.register_buffer(f"mean_{i}", torch.as_tensor(rms.mean, dtype=torch.float64))
                self.register_buffer(f"std_{i}", torch.as_tensor(np.sqrt(rms.var + 1e-8),
                                                                 dtype=torch.float64))
        self.clip = float(lp.job.environment.clip_obs)
        # a flat head takes [B, features]; encoders take images as they are
        self.flatten = not self.structured and lp.job.algorithm.policy.encoder == "mlp"
        n = max(1, lp.spec.n_actions)
        low = np.asarray(lp.spec.action_low if lp.spec.continuous else [0.0] * n, np.float32)
        high = np.asarray(lp.spec.action_high if lp.spec.continuous else [0.0] * n, np.float32)
        self.n_actions = lp.spec.n_actions
        self.nvec = tuple(lp.spec.nvec)
        self.register_buffer("low", torch.as_tensor(low))
        self.register_buffer("high", torch.as_tensor(high))

    def forward(self, *inputs: torch.Tensor):
        xs = []
        for i, x in enumerate(inputs[:len(self.columns)]):
            if self.norm[i]:
                x = torch.clamp((x.double() - getattr(self, f"mean_{i}"))
                                / getattr(self, f"std_{i}"), -self.clip, self.clip).float()
            elif not self.structured:
                x = x.float()
            xs.append(x)
        obs = dict(zip(self.columns, xs)) if self.structured else (
            xs[0].flatten(1) if self.flatten else xs[0])
        if self.featurize is not None:
            obs = self.featurize(obs)
        if self.recurrent:
            out, state = self.head(obs, inputs[-1])
            return self._action(out), state
        return self._action(self.head(obs))

    def _action(self, out: torch.Tensor) -> torch.Tensor:
        if self.kind == "argmax":
            if self.nvec:
                return torch.stack([p.argmax(-1) for p in torch.split(out, list(self.nvec), -1)],
                                   dim=-1)
            return out.argmax(-1)
        if self.kind == "positive":
            return (out > 0).long()
        if self.kind == "clip":
            return torch.maximum(torch.minimum(out, self.high), self.low)
        mu = out[:, : self.n_actions]
        return self.low + (torch.tanh(mu) + 1.0) * 0.5 * (self.high - self.low)

    def example(self) -> tuple[torch.Tensor, ...]:
        """One zero input of each kind, a batch of two: torch.export specialises a
        dimension of size 1, which would fix the exported state's batch at one."""
        if self.structured:
            xs = [torch.zeros((2, *leaf.shape), dtype=getattr(torch, str(leaf.dtype)))
                  for leaf in self.spec.leaves]
        else:
            xs = [torch.zeros((2, *self.spec.obs_shape), dtype=torch.float32)]
        if self.recurrent:
            xs.append(torch.zeros((2, self.head.state_size), dtype=torch.float32))
        return tuple(xs)

    @property
    def input_names(self) -> list[str]:
        return [*self.columns, *(["state"] if self.recurrent else [])]

    @property
    def output_names(self) -> list[str]:
        return ["action", *(["state_out"] if self.recurrent else [])]


def export(path: str | Path, fmt: str, out: str | Path, policy: str = "") -> Path:
    """Write the deterministic policy of checkpoint `path` as TorchScript or ONNX;
    a Hugging Face policy's as a model folder (`fmt` "hf": what
    `from_pretrained` loads); of a multi-agent run, one policy's."""
    lp = load_policy(path, policy)
    if fmt == "hf":
        from ..checkpoint import save_folder_atomic

        save = getattr(lp.algo, "save_pretrained", None)
        if save is None:
            raise ValueError("--format hf is for Hugging Face policies "
                             "(algorithm.policy.kind = \"hf\"); use torchscript or onnx")
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        save_folder_atomic(save, out)
        return out
    module = DeterministicPolicy(lp).eval()
    example = module.example()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        if fmt == "torchscript":
            # each input's shape past the batch and dtype: what a server checks requests by
            meta = {"inputs": module.input_names,
                    "state_size": int(getattr(lp.algo, "state_size", 0)),
                    "shapes": [list(x.shape[1:]) for x in example],
                    "dtypes": [str(x.dtype).removeprefix("torch.") for x in example]}
            torch.jit.save(torch.jit.trace(module, example), str(out),
                           _extra_files={"verl.json": json.dumps(meta)})
        elif fmt == "onnx":
            batch = torch.export.Dim("batch", min=1)
            torch.onnx.export(module, example, str(out), input_names=module.input_names,
                              output_names=module.output_names,
                              dynamic_shapes=(tuple({0: batch} for _ in example),),
                              dynamo=True, verbose=False)
        else:
            raise ValueError(f"unknown format {fmt!r} (torchscript, onnx, hf)")
    return out
