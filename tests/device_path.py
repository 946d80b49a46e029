"""A checker, on the CPU, of what would break on a GPU: a tensor built off the
device path meeting one on it.

Under `OffPath()`, tensors are "on the device path" when they are a module's
parameters or buffers, come out of `.to(device)`/`.cuda()`, of a factory given
`device=`, or of an op that read one on the path. An op (called from the code
under test, named by `watch`: path fragments of its source files) that mixes a
tensor on the path with one off it (built on the CPU by default: `torch.as_tensor`,
`torch.zeros` without `device=`, numpy) is recorded: on a GPU it would raise
"Expected all tensors to be on the same device". Scalars (0-d) mix freely, as
they do on a GPU. Ops inside torch, transformers or peft are not judged (their
code runs on GPUs every day) but do pass the mark on.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

_FACTORIES = {torch.zeros, torch.ones, torch.full, torch.empty, torch.arange, torch.tensor,
              torch.as_tensor, torch.zeros_like, torch.ones_like, torch.full_like,
              torch.empty_like, torch.randn, torch.rand, torch.randint, torch.randperm,
              torch.linspace, torch.eye}


def _tensors(x: Any) -> Iterable[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, list | tuple):
        for y in x:
            yield from _tensors(y)
    elif isinstance(x, dict):
        for y in x.values():
            yield from _tensors(y)


class OffPath(TorchFunctionMode):
    """Records ops of the watched code that mix on-path and off-path tensors."""

    def __init__(self, modules: Iterable[torch.nn.Module], watch: tuple[str, ...]):
        super().__init__()
        self.on: set[int] = set()
        self.keep: list[torch.Tensor] = []  # ids stay unique while the mode lives
        self.watch = watch
        self.found: list[str] = []
        for m in modules:
            for t in (*m.parameters(), *m.buffers()):
                self._mark(t)

    def _mark(self, x: Any) -> None:
        for t in _tensors(x):
            if id(t) not in self.on:
                self.on.add(id(t))
                self.keep.append(t)

    def _caller(self) -> str:
        f = sys._getframe(2)
        while f is not None:
            name = f.f_code.co_filename
            if "/torch/" not in name and name != __file__:
                return f"{name}:{f.f_lineno}"
            f = f.f_back
        return ""

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs = [t for t in _tensors((args, kwargs))]
        on = [t for t in inputs if id(t) in self.on]
        off = [t for t in inputs if id(t) not in self.on and t.dim() > 0]
        name = getattr(func, "__name__", str(func))
        moved = (name == "cuda" or (name == "to" and (
            "device" in kwargs or any(isinstance(a, torch.device | str) for a in args[1:])))
            or (func in _FACTORIES and kwargs.get("device") is not None))
        if on and off and not moved:
            where = self._caller()
            if any(w in where for w in self.watch):
                self.found.append(f"{name} at {where}: {len(off)} tensor(s) off the device "
                                  f"path, shapes {[tuple(t.shape) for t in off][:3]}")
        if on or moved:
            self._mark(out)
        return out
