"""Multi-turn rollouts with tools: a response is the model's turns and the tools'
answers between them, generated as one trajectory.

Each turn the model generates until it closes a tool call (`</tool_call>`),
writes the end token, or spends its turn's tokens (`max_turn_tokens`) or what is
left of the response (`max_response_length`, model and tool tokens together).
A turn that ends in a call gets the tool's answer appended as observation
tokens (`<tool_response>...</tool_response>`, at most
`max_tool_response_length` of them) and the model goes on, up to
`max_assistant_turns` turns. The trajectory travels as one response with an
`observed` column that marks the tools' tokens: they are attended to, never
learned from (no log-probability, loss, KL or entropy counts them), and their
behaviour log-probability is 0.

Each new turn is generated from the whole trajectory so far (prompt, turns,
answers), left-padded as a prompt: the learner's one forward pass over prompt +
response reads every model token in the same context the sampler drew it in.
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch

from .hf import Sampling, draw, pad_left
from .tools import CALL_CLOSE, RESPONSE_CLOSE, RESPONSE_OPEN, Call, Tool, answer, last_call

MAX_CALLS_AT_ONCE = 32  # a turn's tool calls answered together (threads that wait)

__all__ = ["Rollout", "TurnLimits", "agent_generate", "segments", "turn_limits"]


@dataclass(frozen=True)
class TurnLimits:
    """How long a trajectory may grow: assistant turns, model tokens a turn (0: up
    to the response's budget), tokens of one tool answer, and the response's
    budget (model and tool tokens together)."""

    max_turns: int
    turn_tokens: int
    tool_tokens: int
    total: int


def turn_limits(s: Any) -> TurnLimits:
    """A prompt job's limits (`PromptSettings`)."""
    return TurnLimits(s.max_assistant_turns, s.max_turn_tokens, s.max_tool_response_length,
                      s.max_response_length)


@dataclass
class Rollout:
    """Trajectories [N, R] (right-padded): tokens, which are real, which a tool
    wrote, each model token's behaviour log-probability (0 at a tool's); per row
    whether it ended with the end token, the tool calls it wrote (answered or,
    in its last turn, not) and how many of them parsed as calls of a known tool."""

    response: torch.Tensor
    mask: torch.Tensor
    observed: torch.Tensor
    logp: torch.Tensor
    ended: torch.Tensor
    calls: list[int]
    well_formed: list[int]


@dataclass
class _Row:
    prompt: list[int]
    tokens: list[int]
    observed: list[int]
    logp: list[float]
    states: dict[str, Any]
    done: bool = False
    ended: bool = False
    calls: int = 0
    well_formed: int = 0


def _closes_call(tok: Any, tokens: list[int]) -> int:
    """The length of the shortest prefix of `tokens` whose text closes a tool call
    (0: none does)."""
    if CALL_CLOSE not in tok.decode(tokens, skip_special_tokens=False):
        return 0
    for k in range(1, len(tokens) + 1):
        text = tok.decode(tokens[:k], skip_special_tokens=False)
        if CALL_CLOSE in text:
            return k
    return 0


class _StopAtCall:
    """Generation's stopping criterion: a row stops once its new text closes a call."""

    def __init__(self, tok: Any, start: int):
        self.tok, self.start = tok, start
        self.width = len(tok(CALL_CLOSE, add_special_tokens=False).input_ids) + 2

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kw: Any) -> torch.Tensor:
        new = input_ids[:, self.start:]
        tails = new[:, -self.width:].tolist()
        return torch.tensor([CALL_CLOSE in self.tok.decode(t, skip_special_tokens=False)
                             for t in tails], dtype=torch.bool, device=input_ids.device)


def agent_generate(model: Any, tok: Any, prompt: torch.Tensor, prompt_mask: torch.Tensor,
                   s: Sampling, eos: int, pad: int, tools: dict[str, Tool],
                   limits: TurnLimits) -> Rollout:
    """`s.n` multi-turn trajectories for each left-padded prompt (rows of a prompt
    together), each call answered by its tool (`tools.answer`)."""
    n = 1 if s.greedy else s.n
    rows = []
    for ids, m in zip(prompt.tolist(), prompt_mask.tolist(), strict=True):
        real = [t for t, keep in zip(ids, m, strict=True) if keep]
        rows.extend(_Row(real, [], [], [], {}) for _ in range(n))
    one = dataclasses.replace(s, n=1)  # rows are already one a response
    for turn in range(limits.max_turns):
        live = [r for r in rows if not r.done]
        if not live:
            break
        budget = [limits.total - len(r.tokens) for r in live]
        if limits.turn_tokens:
            budget = [min(b, limits.turn_tokens) for b in budget]
        ids, mask = pad_left([r.prompt + r.tokens for r in live], pad)
        new, logp = draw(model, ids, mask, one, eos, pad, max(budget),
                         stop=_StopAtCall(tok, ids.shape[1]))
        last = turn == limits.max_turns - 1
        calls: list[tuple[_Row, Call]] = []
        for r, toks, lps, room in zip(live, new.tolist(), logp.tolist(), budget, strict=True):
            toks, lps = toks[:room], lps[:room]
            # whichever comes first: the end token, or a call's close (after which a
            # finished row is padded, with the end token where it is the pad)
            cut = _closes_call(tok, toks) or len(toks)
            if eos in toks[:cut]:
                cut, r.ended = toks.index(eos) + 1, True
            r.tokens += toks[:cut]
            r.logp += lps[:cut]
            r.observed += [0] * cut
            text = tok.decode(toks[:cut], skip_special_tokens=False)
            parsed = None if r.ended else last_call(text)
            if parsed is not None:  # a call written, answered or not
                r.calls += 1
                r.well_formed += int(not parsed.error and parsed.name in tools)
            if parsed is None or last or len(r.tokens) >= limits.total:
                r.done = True
                continue
            calls.append((r, parsed))
        # the turn's calls at once: each may wait seconds on a sandbox or a tool server
        with ThreadPoolExecutor(max(1, min(len(calls), MAX_CALLS_AT_ONCE))) as pool:
            answers = list(pool.map(lambda c: answer(c[1], tools, c[0].states), calls))
        for (r, _), text in zip(calls, answers, strict=True):
            obs = tok(text, add_special_tokens=False).input_ids
            obs = _cut_answer(tok, obs, limits.tool_tokens)[:limits.total - len(r.tokens)]
            r.tokens += obs
            r.logp += [0.0] * len(obs)
            r.observed += [1] * len(obs)
            r.done = len(r.tokens) >= limits.total
    return _pack(rows, limits.total, pad)


def _cut_answer(tok: Any, obs: list[int], most: int) -> list[int]:
    """A tool's answer within `most` tokens, still closed: its end cut, the closing
    tag kept."""
    if not most or len(obs) <= most:
        return obs
    close = tok(RESPONSE_CLOSE, add_special_tokens=False).input_ids
    return obs[:max(0, most - len(close))] + close


def _pack(rows: list[_Row], width: int, pad: int) -> Rollout:
    N = len(rows)
    resp = torch.full((N, width), pad, dtype=torch.long)
    mask = torch.zeros((N, width), dtype=torch.long)
    observed = torch.zeros((N, width), dtype=torch.long)
    logp = torch.zeros((N, width))
    for i, r in enumerate(rows):
        k = len(r.tokens)
        resp[i, :k] = torch.as_tensor(r.tokens, dtype=torch.long)
        mask[i, :k] = 1
        observed[i, :k] = torch.as_tensor(r.observed, dtype=torch.long)
        logp[i, :k] = torch.as_tensor(r.logp)
    return Rollout(resp, mask, observed, logp, torch.tensor([r.ended for r in rows]),
                   [r.calls for r in rows], [r.well_formed for r in rows])


def segments(text: str) -> list[tuple[str, bool]]:
    """A demonstration's text as (piece, written by a tool) pieces: every
    `<tool_response>...</tool_response>` span is a tool's, the rest the model's
    (what supervised fine-tuning learns from)."""
    out: list[tuple[str, bool]] = []
    at = 0
    while (lo := text.find(RESPONSE_OPEN, at)) >= 0:
        hi = text.find(RESPONSE_CLOSE, lo)
        if hi < 0:
            break
        hi += len(RESPONSE_CLOSE)
        if lo > at:
            out.append((text[at:lo], False))
        out.append((text[lo:hi], True))
        at = hi
    if at < len(text):
        out.append((text[at:], False))
    return out
