"""The policy-gradient family with a recurrent network (`policy/recurrent.py`):
acting one step with a state, a no-grad pass over a whole batch from the
shipped states, and a batch cut into sequences for minibatches.

Shapes: a batch's columns are [T, N] (T steps of N env columns); it holds each
column's state before its first step (`rnn_state` [N, S]) and where episodes
start (`first` [T, N], `bootstrap_first` [N]). A sequence is `chunk` steps of
one column (chunk divides T); a recurrent update's data is [K * N, chunk, ...]
with K = T / chunk.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from ..batch import FIRST, STATE, bootstrap
from ..envs.spaces import Leaf, gather
from ..policy.encoders import obs_apply, obs_tensor

Arrays = Mapping[str, np.ndarray]
Passed = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def act_recurrent(net: Any, obs: Any, deterministic: bool, state: Any, device: torch.device
                  ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Actions, log-probabilities, values and the next state (`rnn_state`) of a batch
    of envs; `state` = (states [B, S], episode starts [B]), None: all start."""
    n = len(next(iter(obs.values()))) if isinstance(obs, dict) else len(obs)
    h, first = state if state is not None else (
        np.zeros((n, net.state_size), np.float32), np.ones(n, bool))
    out, value, nxt = net.step(obs, torch.as_tensor(h, device=device),
                               torch.as_tensor(first, device=device))
    d = net.make_dist(out)
    a = net.mode(d) if deterministic else net.sample(d)
    return a.cpu().numpy(), {"logp": net.log_prob(d, a).cpu().numpy(),
                             "value": value.cpu().numpy(), "rnn_state": nxt.cpu().numpy()}


def sequence_pass(net: Any, batch: Arrays, leaves: tuple[Leaf, ...], chunk: int,
                  device: torch.device) -> Passed:
    """The network over a whole [T, N] batch, chunk by chunk from the shipped
    states: log pi(a_t|h_t), V(h_t) [T, N], the bootstrap value [N] and the state
    before each chunk [K, N, S]."""
    T, N = batch["reward"].shape
    L = chunk
    obs = obs_apply(gather(batch, leaves),
                    lambda x: torch.as_tensor(np.swapaxes(np.asarray(x), 0, 1), device=device))
    first = torch.as_tensor(np.asarray(batch[FIRST]).T, device=device)
    act = torch.as_tensor(np.swapaxes(np.asarray(batch["action"]), 0, 1), device=device)
    h = torch.as_tensor(np.asarray(batch[STATE]), device=device)
    logps, values, starts = [], [], []
    with torch.no_grad():
        for k in range(T // L):
            cut = slice(k * L, (k + 1) * L)
            starts.append(h)
            out, v, h = net.unroll(obs_apply(obs, lambda x, c=cut: x[:, c]), h, first[:, cut])
            a = act[:, cut]
            logps.append(net.log_prob(net.make_dist(out.reshape(N * L, -1)),
                                      a.reshape(N * L, *a.shape[2:])).reshape(N, L))
            values.append(v)
        boot_obs = obs_tensor(gather(batch, leaves, "bootstrap_"), device)
        _, boot, _ = net.step(boot_obs, h, torch.as_tensor(
            np.asarray(batch[bootstrap(FIRST)]), device=device))
    return (torch.cat(logps, 1).T.cpu().numpy(), torch.cat(values, 1).T.cpu().numpy(),
            boot.cpu().numpy(), torch.stack(starts).cpu().numpy())


def cut_sequences(batch: Arrays, est: Any, columns: dict[str, np.ndarray],
                  obs_columns: tuple[str, ...], chunk: int, starts: np.ndarray,
                  to_device: Callable[[Any], torch.Tensor]) -> dict[str, torch.Tensor]:
    """A recurrent update's data: [T, N] columns (and the advantage estimator's
    `est`) cut into [K * N, chunk, ...] sequences (a minibatch takes whole ones),
    with each sequence's initial state `state0` [K * N, S] from `starts` [K, N, S]."""
    T, N = batch["reward"].shape
    L = chunk
    K = T // L

    def seqs(x: Any) -> torch.Tensor:
        a: np.ndarray = np.asarray(x)
        a = np.swapaxes(a.reshape(K, L, N, *a.shape[2:]), 1, 2)
        return to_device(np.ascontiguousarray(a.reshape(K * N, L, *a.shape[3:])))

    col = np.broadcast_to(np.arange(N), (T, N))
    data = {c: seqs(batch[c]) for c in obs_columns}
    if "obs" in data:
        data["obs"] = data["obs"].float()
    data |= {"action": seqs(batch["action"]), "logp": seqs(batch["logp"]).float(),
             "value": seqs(est.value).float(), "adv": seqs(est.adv), "ret": seqs(est.ret),
             "column": seqs(col), "valid": seqs(np.asarray(batch["valid"], bool)),
             "first": seqs(np.asarray(batch[FIRST], bool)),
             **{k: seqs(v) for k, v in columns.items()},
             "state0": to_device(starts.reshape(K * N, -1)).float()}
    return data
