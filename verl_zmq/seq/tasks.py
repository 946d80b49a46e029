"""Sequence tasks: prompts from a seeded generator, responses scored by a reward
function. Torch-free (samplers and the evaluator step these envs).

Tokens: 0 is padding, 1 begins a prompt, 2 separates prompt from response, 3
ends a response, 4..13 are the digits 0..9. A policy emits actions 0..10, the
tokens 3..13 (end or a digit); `token = action + FIRST_ACTION_TOKEN`.

A reward function is called as `fn(prompt, response, meta) -> float`: the
prompt's and the response's tokens as lists of ints (the response without its
end token) and the task's metadata (`task`, `prompt_text`, `response_text`,
`ended`: whether the response ended with the end token, and the task's own keys:
`target` for reversal, `sum` and `length` for digit sums).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..importing import load_object

PAD, BOS, SEP, EOS = 0, 1, 2, 3
DIGIT0 = 4
FIRST_ACTION_TOKEN = EOS  # actions 0..10 are the tokens EOS, digit 0, ..., digit 9
N_ACTIONS = 11
VOCAB = N_ACTIONS + FIRST_ACTION_TOKEN  # every token id is below this

class RewardFn(Protocol):
    """A sequence task's score of one response (`environment.kwargs.reward`, a
    `module:function`): the prompt's and the response's token ids and the
    episode's metadata (`ended`: whether the response finished, and the task's
    own fields) -> a float. It may raise or hang: the env counts the error and
    scores the response 0 (`on_error`)."""

    def __call__(self, prompt: list[int], response: list[int],
                 meta: dict[str, Any]) -> float: ...


def digits_text(tokens) -> str:
    """Digits as text; other tokens as `|` (separator) or `$` (end)."""
    names = {PAD: "", BOS: "", SEP: "|", EOS: "$"}
    return "".join(names.get(int(t), str(int(t) - DIGIT0)) for t in tokens)


def held_out(prompt: list[int]) -> bool:
    """One prompt in ten, chosen by a hash of its tokens, is kept for evaluation."""
    return zlib.crc32(bytes(prompt)) % 10 == 0


@dataclass(frozen=True)
class Task:
    """A prompt generator, its metadata, and the default scores of a response."""

    name: str
    max_prompt: int  # tokens, the first and the separator included
    max_response: int  # tokens, the end token included

    def draw(self, rng: np.random.Generator) -> tuple[list[int], dict]:
        raise NotImplementedError

    def exact(self, response: list[int], ended: bool, meta: dict) -> bool:
        raise NotImplementedError

    def partial(self, response: list[int], ended: bool, meta: dict) -> float:
        raise NotImplementedError

    def demonstration(self, meta: dict) -> list[int] | None:
        """A correct response (with its end token), or None where no demonstration exists."""
        return None


@dataclass(frozen=True)
class Reverse(Task):
    """Reverse a string of 5-8 digits. Partial credit: the tokens in place, the end
    token included, over the longer of the target and the response (so a response
    of the right length earns its end token)."""

    name: str = "reverse"
    min_digits: int = 5
    max_digits: int = 8
    max_prompt: int = 10
    max_response: int = 9

    def draw(self, rng):
        n = int(rng.integers(self.min_digits, self.max_digits + 1))
        digits = rng.integers(0, 10, n)
        prompt = [BOS] + [DIGIT0 + int(d) for d in digits] + [SEP]
        return prompt, {"target": [DIGIT0 + int(d) for d in digits[::-1]]}

    def exact(self, response, ended, meta):
        return ended and response == meta["target"]

    def partial(self, response, ended, meta):
        target = [*meta["target"], EOS]
        said = [*response, EOS] if ended else response
        right = sum(a == b for a, b in zip(said, target, strict=False))
        return right / max(len(target), len(said))

    def demonstration(self, meta):
        return [*meta["target"], EOS]


@dataclass(frozen=True)
class DigitSum(Task):
    """Emit `length` digits that sum to the target in the prompt (no demonstration
    ships: the policy must find such strings). Partial credit falls linearly with
    the distance to the target and halves for a wrong length."""

    name: str = "digitsum"
    length: int = 4
    max_prompt: int = 4
    max_response: int = 7

    def draw(self, rng):
        s = int(rng.integers(4, 9 * self.length - 3))
        prompt = [BOS, DIGIT0 + s // 10, DIGIT0 + s % 10, SEP]
        return prompt, {"sum": s, "length": self.length}

    def _digits(self, response):
        return [t - DIGIT0 for t in response if t >= DIGIT0]

    def exact(self, response, ended, meta):
        d = self._digits(response)
        return ended and len(d) == meta["length"] and sum(d) == meta["sum"]

    def partial(self, response, ended, meta):
        d = self._digits(response)
        closeness = max(0.0, 1.0 - abs(sum(d) - meta["sum"]) / 10.0)
        return closeness * (1.0 if ended and len(d) == meta["length"] else 0.5)


TASKS: dict[str, type[Task]] = {"reverse": Reverse, "digitsum": DigitSum}


def make_task(name: str) -> Task:
    if name not in TASKS:
        raise ValueError(f"environment.kwargs.task: unknown task {name!r} "
                         f"(one of {', '.join(sorted(TASKS))})")
    return TASKS[name]()


def load_reward_fn(path: str) -> RewardFn:
    """`module:function`, imported (never evaluated): the job's reward function."""
    fn = load_object(path, "environment.kwargs.reward")
    if not callable(fn):
        raise ValueError(f"environment.kwargs.reward {path!r} is not callable")
    return fn


def default_reward(task: Task, kind: str) -> RewardFn:
    """The task's own score: "exact" (1 or 0) or "partial" (partial credit)."""
    if kind not in ("exact", "partial"):
        raise ValueError(f"environment.kwargs.reward: {kind!r}: expected \"exact\", "
                         f"\"partial\" or a module:function")

    def score(prompt, response, meta):
        if kind == "exact":
            return float(task.exact(response, meta["ended"], meta))
        return float(task.partial(response, meta["ended"], meta))

    return score
