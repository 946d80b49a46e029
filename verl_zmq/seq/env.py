"""Sequence tasks as gymnasium envs: one episode is one prompt and its response.

The observation is the token buffer so far (prompt, separator, response),
padded to `max_prompt + max_response` as float32; an action appends one token.
The episode ends at the end token or at `max_response` tokens, with the reward
function's score as its only reward. A response whose reward function raised or
returned a non-finite value is counted and scored as `on_error` says: "zero"
(a score of 0, the episode terminates) or "drop" (the episode is truncated,
not terminated, with no reward: GRPO leaves it out of its group and PPO
bootstraps it from its value).

`SeqVectorEnv`, what samplers step, runs its envs in lock-step rounds of
exactly `max_response + 1` steps: `group_size` consecutive envs answer the same
prompt (GRPO's group), an env whose response ended waits with its steps marked
void (`info["void"]`) until the round's last step, where every env starts its
next prompt at once. A fragment whose length is a multiple of the round holds
whole groups only, so a learner can normalise rewards within each group.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np

from ..log import get_logger
from .tasks import (
    EOS,
    FIRST_ACTION_TOKEN,
    N_ACTIONS,
    PAD,
    VOCAB,
    Task,
    default_reward,
    digits_text,
    held_out,
    load_reward_fn,
    make_task,
)


class Sequences:
    """E token buffers, their prompts and the scoring of finished responses."""

    def __init__(self, n: int, task: str = "reverse", split: str = "train",
                 reward: str = "partial", on_error: str = "zero"):
        if split not in ("train", "test", "all"):
            raise ValueError(f"environment.kwargs.split: {split!r}: expected train, test or all")
        if on_error not in ("zero", "drop"):
            raise ValueError(f"environment.kwargs.on_error: {on_error!r}: expected zero or drop")
        self.task: Task = make_task(task)
        self.split = split
        self.on_error = on_error
        self.score_fn = load_reward_fn(reward) if ":" in reward \
            else default_reward(self.task, reward)
        self.L = self.task.max_prompt + self.task.max_response
        self.buf = np.full((n, self.L), PAD, np.int64)
        self.plen = np.zeros(n, np.int64)
        self.rlen = np.zeros(n, np.int64)
        self.done = np.ones(n, bool)
        self.metas: list[dict] = [{} for _ in range(n)]
        self.reward_errors = 0
        self.last_error = ""
        self.rng = np.random.default_rng()

    def seed(self, seed: int | None) -> None:
        if seed is not None:
            self.rng = np.random.default_rng(seed)

    def draw(self) -> tuple[list[int], dict]:
        """A prompt of this env's split."""
        while True:
            prompt, meta = self.task.draw(self.rng)
            if self.split == "all" or held_out(prompt) == (self.split == "test"):
                return prompt, meta

    def start(self, i: int, prompt: list[int], meta: dict) -> None:
        self.buf[i] = PAD
        self.buf[i, :len(prompt)] = prompt
        self.plen[i], self.rlen[i], self.done[i] = len(prompt), 0, False
        self.metas[i] = meta

    def obs(self) -> np.ndarray:
        return self.buf.astype(np.float32)

    def append(self, i: int, action: int) -> tuple[bool, float, bool]:
        """Append env i's token: (ended, reward, dropped)."""
        token = int(action) + FIRST_ACTION_TOKEN
        self.buf[i, self.plen[i] + self.rlen[i]] = token
        self.rlen[i] += 1
        ended = token == EOS
        if not ended and self.rlen[i] < self.task.max_response:
            return False, 0.0, False
        self.done[i] = True
        score = self.score(i, ended)
        if score is None:
            return True, 0.0, self.on_error == "drop"
        return True, score, False

    def score(self, i: int, ended: bool) -> float | None:
        """The reward function's score of env i's response; None when it failed."""
        p, r = int(self.plen[i]), int(self.rlen[i])
        prompt = self.buf[i, :p].tolist()
        response = self.buf[i, p:p + r - (1 if ended else 0)].tolist()
        meta = {**self.metas[i], "task": self.task.name, "ended": ended,
                "prompt_text": digits_text(prompt), "response_text": digits_text(response)}
        try:
            value = float(self.score_fn(prompt, response, meta))
            if not math.isfinite(value):
                raise ValueError(f"non-finite score {value}")
            return value
        except Exception as e:  # a user's function: any failure is counted, never fatal
            self.reward_errors += 1
            self.last_error = f"{type(e).__name__}: {e}"
            if self.reward_errors <= 3 or self.reward_errors % 100 == 0:
                get_logger().warning(
                    "reward_fn_failed", error=self.last_error, errors=self.reward_errors,
                    scored_as=self.on_error, prompt=meta["prompt_text"])
            return None


def _spaces(seq: Sequences) -> tuple[gym.spaces.Box, gym.spaces.Discrete]:
    return (gym.spaces.Box(0.0, float(VOCAB - 1), (seq.L,), np.float32),
            gym.spaces.Discrete(N_ACTIONS))


class SeqEnv(gym.Env):
    """One sequence task: an episode is one prompt of the split and its response."""

    metadata = {"render_modes": []}

    def __init__(self, **kwargs):
        kwargs.pop("group_size", None)  # a vector env's setting
        self.seq = Sequences(1, **kwargs)
        self.observation_space, self.action_space = _spaces(self.seq)

    @property
    def reward_errors(self) -> int:
        return self.seq.reward_errors

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.seq.seed(seed)
        prompt, meta = self.seq.draw()
        self.seq.start(0, prompt, meta)
        return self.seq.obs()[0], {}

    def step(self, action):
        ended, reward, dropped = self.seq.append(0, int(action))
        return self.seq.obs()[0], reward, ended and not dropped, dropped, {}


class SeqVectorEnv(gym.vector.VectorEnv):
    """`num_envs` sequences in lock-step rounds, `group_size` per prompt (see module)."""

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}

    def __init__(self, num_envs: int = 1, group_size: int = 1, **kwargs):
        if group_size < 1 or num_envs % group_size:
            raise ValueError(f"environment.kwargs.group_size: {group_size} must divide "
                             f"sampling.num_envs_per_worker = {num_envs}")
        self.num_envs = num_envs
        self.group_size = group_size
        self.seq = Sequences(num_envs, **kwargs)
        self.single_observation_space, self.single_action_space = _spaces(self.seq)
        self.observation_space = gym.vector.utils.batch_space(
            self.single_observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self.round_len = self.seq.task.max_response + 1
        self.t = 0  # step within the round

    @property
    def reward_errors(self) -> int:
        return self.seq.reward_errors

    def counters(self) -> dict[str, int]:
        """What its sampler reports (`sampling.collector.Counted`)."""
        return {"reward_errors": self.seq.reward_errors}

    def _new_round(self) -> None:
        G = self.group_size
        for g in range(self.num_envs // G):
            prompt, meta = self.seq.draw()
            for i in range(g * G, (g + 1) * G):
                self.seq.start(i, prompt, meta)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        self.seq.seed(seed)
        self._new_round()
        return self.seq.obs(), {}

    def step(self, actions):
        E = self.num_envs
        reward = np.zeros(E, np.float64)
        term = np.zeros(E, bool)
        trunc = np.zeros(E, bool)
        void = self.seq.done.copy()  # ended earlier this round: waiting for the round's end
        if self.t == self.round_len - 1:  # every response has ended: next prompts, at once
            self._new_round()
            return self.seq.obs(), reward, term, trunc, {"void": np.ones(E, bool)}
        for i in np.flatnonzero(~void):
            ended, reward[i], dropped = self.seq.append(i, actions[i])
            term[i], trunc[i] = ended and not dropped, dropped
        self.t += 1
        return self.seq.obs(), reward, term, trunc, {"void": void}
