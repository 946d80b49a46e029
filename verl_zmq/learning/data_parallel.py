"""Data-parallel learners (`training.num_learners = N`): N learner processes are
one logical learner of the group, with torch.distributed underneath (gloo on
CPU, NCCL when every learner has a GPU).

Rendezvous goes through the registry: rank 0 (`learner-0`) advertises a
`dist` endpoint (a free port of the job's range) with its other endpoints; the
other ranks wait for it in the membership and join. Rank 0 then broadcasts its
state (parameters, buffers, optimiser moments, env steps, version), so a group
that re-forms after a fault starts from one state, rank 0's latest checkpoint.

Each rank updates on its share of the group's batch (`Job.learner_view`) and
the algorithm calls `reduce` after every backward pass, as it would a gossip
peer's: one all-reduce of the flat gradient and the scalars, then the mean, so
every rank takes the same optimiser step and all hold identical parameters
(DD-PPO). After each update the ranks sum the env steps they consumed, so the
budget, schedules and checkpoints run on the group's count on every rank.

A collective waits at most `training.learner_timeout_s`; a learner of the
group that the registry drops or sees restarted makes the others leave too
(`learner_group_broken`), and the launcher restarts them all.
"""

from __future__ import annotations

import datetime
import os
import socket
from collections.abc import Sequence

import torch
import torch.distributed as dist

from ..algos.optim import Adam
from ..comm.transport import candidate_ports
from ..policy.nets import flat_grad, set_flat_grad


def free_port(host: str, lo: int, hi: int, reserved: frozenset[int] = frozenset()) -> int:
    """A port of [lo, hi] that nothing listens on now (the store binds it next); tried
    in random order, as the job's sockets take theirs."""
    bind = "" if host in ("*", "0.0.0.0") else host
    for port in candidate_ports(lo, hi, reserved):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((bind, port))
            except OSError:
                continue
            return port
    raise OSError(f"no free port in launch.port_range [{lo}, {hi}] on {host}")


def backend_for(device: str) -> str:
    return "nccl" if device.startswith("cuda") and dist.is_nccl_available() else "gloo"


class LearnerGroup:
    """This process's place in a data-parallel learner: rank, world, collectives."""

    def __init__(self, rank: int, world: int, device: str, timeout_s: float):
        self.rank, self.world = rank, world
        self.device = torch.device(device)
        self.backend = backend_for(device)
        self.timeout = datetime.timedelta(seconds=timeout_s)
        self.group_steps = 0  # the group's env steps after the last update

    @property
    def primary(self) -> bool:
        return self.rank == 0

    def join(self, endpoint: str) -> None:
        """Blocking: form the process group at rank 0's `tcp://host:port`."""
        if endpoint.startswith("tcp://127."):  # one machine: gloo talks over loopback
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        dist.init_process_group(self.backend, init_method=endpoint, rank=self.rank,
                                world_size=self.world, timeout=self.timeout)

    def leave(self, barrier_s: float = 30.0) -> None:
        """Leave together: a bounded barrier first, so that rank 0 (which holds the
        rendezvous store) does not tear it down under a rank still finishing its last
        collective, which makes gloo abort that rank."""
        if not dist.is_initialized():
            return
        try:
            if self.backend == "gloo":
                dist.monitored_barrier(timeout=datetime.timedelta(seconds=barrier_s))
            else:
                dist.barrier()
        except RuntimeError:
            pass  # a rank already gone: nothing left to wait for
        dist.destroy_process_group()

    # -- state ------------------------------------------------------------------

    def broadcast_state(self, modules: Sequence[torch.nn.Module | torch.Tensor],
                        optimisers: list[Adam],
                        counters: list[int]) -> list[int]:
        """Rank 0's parameters, buffers, optimiser moments and `counters` everywhere
        (`modules` may hold plain tensors too, such as SAC's log-temperature)."""
        for m in modules:
            for t in ([m] if torch.is_tensor(m) else [*m.parameters(), *m.buffers()]):
                dist.broadcast(t.data, 0)
        for opt in optimisers:
            for group in opt.param_groups:
                for p in group["params"]:
                    for t in _moments(opt, p):
                        dist.broadcast(t, 0)
        c = torch.tensor(counters, dtype=torch.float64, device=self._comm_device())
        dist.broadcast(c, 0)
        return [int(x) for x in c.tolist()]

    # -- collectives ----------------------------------------------------------------

    def reduce(self, params: Sequence[torch.Tensor] | None,
               scalars: dict[str, float]) -> dict[str, float]:
        """The algorithm's `reduce_grads`: one all-reduce of the flat gradient and the
        scalars; the mean comes back into `.grad` and the returned scalars."""
        keys = sorted(scalars)
        parts = [torch.tensor([scalars[k] for k in keys], dtype=torch.float32,
                              device=self._comm_device())]
        if params is not None:
            parts.insert(0, flat_grad(params, self._comm_device()))
        flat = torch.cat(parts)
        dist.all_reduce(flat)
        flat /= self.world
        if params is not None:
            set_flat_grad(params, flat)
        tail = flat[len(flat) - len(keys):].tolist()
        return dict(zip(keys, tail, strict=True))

    def sum_steps(self, own_total: int) -> int:
        """The group's env steps: ours since the last call, summed over the ranks."""
        mine = torch.tensor([own_total - self.group_steps], dtype=torch.float64,
                            device=self._comm_device())
        dist.all_reduce(mine)
        self.group_steps += int(mine.item())
        return self.group_steps

    def max_steps(self, own_total: int) -> int:
        """The group's env steps off-policy: every rank reads the shards' shared count,
        so the group's is the largest any rank has seen, not a sum."""
        mine = torch.tensor([max(own_total, self.group_steps)], dtype=torch.float64,
                            device=self._comm_device())
        dist.all_reduce(mine, op=dist.ReduceOp.MAX)
        self.group_steps = int(mine.item())
        return self.group_steps

    def _comm_device(self) -> torch.device:
        return self.device if self.backend == "nccl" else torch.device("cpu")


def _moments(opt: Adam, p: torch.Tensor) -> list[torch.Tensor]:
    """The optimiser's per-parameter state tensors, created (zero, step 0) where rank 0
    has some and this rank none yet, in a fixed order."""
    state = opt.moments(p)
    return [state[k] for k in sorted(state) if torch.is_tensor(state[k])]
