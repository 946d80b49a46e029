"""Adam without `torch.optim`: the same arithmetic as `torch.optim.Adam` with
`foreach=True` (bit for bit, tests/test_optim.py), in a class of our own.

Why: `torch.optim.Optimizer` imports `torch._dynamo` when it is built and on
every first `step`, `zero_grad` and `state_dict` (its methods are wrapped to be
skipped by the compiler): 1.5-2 s of a core, more than torch's own import on a
small machine, spent before a learner's first update and again by every
restarted learner. Nothing here is compiled, so nothing needs the compiler.

The state dict has `torch.optim.Adam`'s layout (`state` by parameter index,
`param_groups` with the hyper-parameters), so checkpoints written with either
load into either.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor


class Adam:
    """Adam (Kingma & Ba) over one group of parameters, with L2 `weight_decay`
    as `torch.optim.Adam` applies it; `param_groups[0]["lr"]` may be changed
    between steps (schedules)."""

    def __init__(self, params: Iterable[Tensor], lr: float,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0):
        ps = list(params)
        if not ps:
            raise ValueError("Adam: no parameters to optimise")
        self.defaults: dict[str, Any] = {
            "lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay,
            "amsgrad": False, "maximize": False, "foreach": True, "capturable": False,
            "differentiable": False, "fused": None, "decoupled_weight_decay": False}
        self.param_groups: list[dict[str, Any]] = [{**self.defaults, "params": ps}]
        self.state: defaultdict[Tensor, dict[str, Tensor]] = defaultdict(dict)

    @property
    def params(self) -> list[Tensor]:
        ps: list[Tensor] = self.param_groups[0]["params"]
        return ps

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.detach_().zero_()

    def moments(self, p: Tensor) -> dict[str, Tensor]:
        """`p`'s state: step count and moments, created (zero) on first use."""
        st = self.state[p]
        if not st:  # as torch.optim.Adam: the step count a float32 tensor on the CPU
            st["step"] = torch.tensor(0.0, dtype=_scalar_dtype())
            st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return st

    @torch.no_grad()
    def step(self) -> None:
        g = self.param_groups[0]
        groups: dict[tuple[torch.device, torch.dtype], list[Tensor]] = {}
        for p in self.params:
            if p.grad is not None:
                groups.setdefault((p.device, p.dtype), []).append(p)
        for ps in groups.values():
            self._step(ps, g)

    def _step(self, ps: list[Tensor], g: dict[str, Any]) -> None:
        """`torch.optim.adam._multi_tensor_adam`'s sequence of foreach calls."""
        lr, eps, wd = float(g["lr"]), float(g["eps"]), float(g["weight_decay"])
        beta1, beta2 = (float(b) for b in g["betas"])
        sts = [self.moments(p) for p in ps]
        grads: list[Tensor] = [p.grad for p in ps if p.grad is not None]
        avgs, sqs = [s["exp_avg"] for s in sts], [s["exp_avg_sq"] for s in sts]
        steps = [s["step"] for s in sts]
        torch._foreach_add_(steps, torch.tensor(1.0), alpha=1.0)
        if wd != 0:
            grads = list(torch._foreach_add(grads, ps, alpha=wd))
        torch._foreach_lerp_(avgs, grads, 1 - beta1)
        torch._foreach_mul_(sqs, beta2)
        torch._foreach_addcmul_(sqs, grads, grads, 1 - beta2)
        counts = [s.item() for s in steps]
        step_size = [(lr / (1 - beta1 ** n)) * -1 for n in counts]
        bc2_sqrt = [(1 - beta2 ** n) ** 0.5 for n in counts]
        denom = torch._foreach_sqrt(sqs)
        torch._foreach_div_(denom, bc2_sqrt)
        torch._foreach_add_(denom, eps)
        torch._foreach_addcdiv_(ps, avgs, denom, step_size)

    def state_dict(self) -> dict[str, Any]:
        g = self.param_groups[0]
        index = {id(p): i for i, p in enumerate(self.params)}
        return {"state": {index[id(p)]: dict(s) for p, s in self.state.items() if s},
                "param_groups": [{**{k: v for k, v in g.items() if k != "params"},
                                  "params": list(range(len(self.params)))}]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """A state dict of ours or of `torch.optim.Adam` over the same parameters."""
        saved = state["param_groups"]
        if len(saved) != 1 or len(saved[0]["params"]) != len(self.params):
            raise ValueError(f"optimiser state for {sum(len(s['params']) for s in saved)} "
                             f"parameters in {len(saved)} groups; this one has "
                             f"{len(self.params)} in 1")
        g = self.param_groups[0]
        g.update({k: v for k, v in saved[0].items() if k != "params" and k in g})
        self.state.clear()
        for i, p in enumerate(self.params):
            s = state["state"].get(i)
            if not s:
                continue
            self.state[p] = {
                "step": torch.as_tensor(s["step"], dtype=_scalar_dtype()).clone(),
                "exp_avg": s["exp_avg"].to(p.device, p.dtype).clone(),
                "exp_avg_sq": s["exp_avg_sq"].to(p.device, p.dtype).clone()}


def _scalar_dtype() -> torch.dtype:
    return torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32
