"""A sampler's rollout on a prompt file: whole responses by `generate`, one
fragment column per response (`seq/prompts.py` for the layout). No I/O: the
sampler role sends what `collect` returns, as it sends a `Collector`'s.

Each fragment holds `num_envs_per_worker / group_size` prompts from this
sampler's deck, `group_size` responses each (sampled with the KV cache), each
scored with the job's `compute_score` on the decoded text. A scorer that raises,
returns no number or does not return within `reward_timeout_s` is counted
(`reward_errors`) and scores 0 (`on_error = "zero"`) or leaves its response out
(`"drop"`: truncated, GRPO skips it).

With `tools` a response is a multi-turn trajectory (`seq/agent_loop.py`): the
model's turns and the tools' answers, the answers' tokens marked in the
`observed` column.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..batch import OBSERVED, PROMPT
from ..log import get_logger
from ..sampling.collector import swap_params
from .agent_loop import agent_generate, turn_limits
from .hf import generate, pad_left
from .prompts import PromptDeck, encode_prompts
from .reward_model import model_scores
from .scoring import load_compute_score, score_response
from .tools import load_tools

__all__ = ["GenerateCollector"]


class _Worker:
    """One daemon thread that runs calls handed to it. A call that does not return
    in time is abandoned with its thread (a daemon: it cannot keep the process
    from exiting) and the next call gets a fresh worker."""

    def __init__(self) -> None:
        self.calls: queue.SimpleQueue[tuple[Callable[[], Any], list[Any], threading.Event]] = \
            queue.SimpleQueue()
        threading.Thread(target=self._run, daemon=True, name="scorer").start()

    def _run(self) -> None:
        while True:
            fn, box, done = self.calls.get()
            try:
                box.append((True, fn()))
            except BaseException as e:  # handed back to the caller, whatever it is
                box.append((False, e))
            done.set()

    def call(self, fn: Callable[[], Any], timeout_s: float) -> Any:
        box: list[Any] = []
        done = threading.Event()
        self.calls.put((fn, box, done))
        if not done.wait(timeout_s):
            raise TimeoutError(f"the reward function did not return in {timeout_s:g} s")
        ok, value = box[0]
        if not ok:
            raise value
        return value


class Scorer:
    """The job's scorer and its failures (what `sampler/reward_errors` reports): each
    call in a worker thread, bounded by `timeout_s` (a hung scorer is counted and
    left behind; the sampler goes on)."""

    def __init__(self, path: str, on_error: str, timeout_s: float = 10.0,
                 name: str = "compute_score"):
        self.fn = load_compute_score(path, "environment.kwargs.reward", name)
        self.on_error = on_error
        self.timeout_s = timeout_s
        self.reward_errors = 0
        self.metrics: dict[str, list[float]] = {}
        self.worker = _Worker()

    def count_failure(self, n: int, why: str) -> None:
        """`n` responses that could not be scored, for `why`."""
        self.reward_errors += n
        get_logger().warning("reward_failed", error=why, responses=n,
                             errors=self.reward_errors, scored_as=self.on_error)

    def __call__(self, source: str, text: str, truth: str, extra: dict[str, Any]
                 ) -> float | None:
        try:
            s = self.worker.call(
                lambda: score_response(self.fn, source, text, truth, extra), self.timeout_s)
        except Exception as e:  # a user's function: any failure is counted, never fatal
            if isinstance(e, TimeoutError):
                self.worker = _Worker()  # the hung one keeps its thread; we go on
            self.reward_errors += 1
            if self.reward_errors <= 3 or self.reward_errors % 100 == 0:
                get_logger().warning(
                    "reward_fn_failed", error=f"{type(e).__name__}: {e}",
                    errors=self.reward_errors, scored_as=self.on_error, data_source=source)
            return None
        for k, v in s.metrics.items():
            self.metrics.setdefault(k, []).append(v)
        return float(s.score)

    def close(self) -> None:
        """Nothing to release (the sampler role closes its collector's `venv`)."""


class GenerateCollector:
    """Generates groups of responses to this sampler's prompts and cuts them into
    fragments (see the module): a `sampling.Collector`."""

    def __init__(self, job: Any, algo: Any, worker: int, workers: int):
        self.job, self.algo = job, algo
        s = self.settings = algo.settings
        self.T = s.max_response_length
        self.E = job.sampling.num_envs_per_worker
        self.prompts_per_fragment = self.E // s.group_size
        enc = encode_prompts(s.train_files, algo.tok, s)
        self.records, self.ids = enc.records, enc.ids
        self.deck = PromptDeck(len(self.records), worker, workers, job.experiment.seed)
        # what the role reports (reward_errors) and closes
        self.venv = Scorer(s.rule, s.on_error, s.reward_timeout_s, s.reward_name)
        self.version = 0
        self.pending: tuple[int, dict] | None = None
        self.steps = 0  # fragment rows generated (a row: one token slot of every response)
        self.swaps = 0
        self.rejected_params = 0
        self.seeds: list[int] = []  # no envs
        self.gen_s = 0.0
        self.tokens = 0
        self.tools = load_tools(s.tool_paths, limits=s.tool_limits) if s.tool_paths else {}
        self.limits = turn_limits(s)
        self.calls = self.well_formed = 0
        self.model_score_sum, self.model_scored = 0.0, 0  # the reward model's scores

    def swap(self) -> None:
        """Load params that arrived, if they are new (or the first)."""
        swap_params(self)

    def infos_taken(self) -> dict[str, list[float]]:
        """Generated responses report no env `info`."""
        return {}

    def collect(self) -> tuple[dict[str, np.ndarray], int]:
        """One fragment of whole groups; (arrays, the policy version they came from)."""
        self.swap()
        a, s = self.algo, self.settings
        which = self.deck.draw(self.prompts_per_fragment)
        # generated at the longest prompt's width, shipped at the job's
        prompt, pmask = pad_left([self.ids[i] for i in which], a.pad)
        t0 = time.monotonic()
        observed = None
        if self.tools:
            g = agent_generate(a.model, a.tok, prompt, pmask, a.sampling(), a.eos, a.pad,
                               self.tools, self.limits)
            observed = g.observed.numpy().T.astype(bool)
            self.calls += sum(g.calls)
            self.well_formed += sum(g.well_formed)
        else:
            g = generate(a.model, prompt, pmask, a.sampling(), a.eos, a.pad)
        self.gen_s += time.monotonic() - t0
        texts = a.decode(g.response, g.mask)
        lengths = g.mask.sum(1).numpy()
        self.tokens += int(lengths.sum())
        E, T, G = self.E, self.T, s.group_size
        scores, dropped = self._scores([self.records[which[j // G]] for j in range(E)], texts)
        valid = g.mask.numpy().T.astype(bool)  # [T, E]
        last = np.zeros((T, E), bool)
        last[np.maximum(lengths - 1, 0), np.arange(E)] = True
        reward = np.where(last, scores[None], 0.0).astype(np.float32)
        rows = np.full((len(which), s.max_prompt_length), -1, np.int64)
        rows[:, s.max_prompt_length - prompt.shape[1]:] = torch.where(pmask.bool(), prompt,
                                                                       -1).numpy()
        rows = np.repeat(rows, G, axis=0)
        self.steps += T
        arrays = {
            "obs": np.zeros((T, E, 0), np.float32),
            "action": g.response.numpy().T.astype(np.int64),
            "terminated": last & ~dropped[None], "truncated": last & dropped[None],
            "valid": valid, "reward": reward,
            "logp": g.logp.numpy().T.astype(np.float32),
            "bootstrap_obs": np.zeros((E, 0), np.float32),
            "bootstrap_logp": np.zeros(E, np.float32),
            PROMPT: rows.astype(np.int64),
            "ep_return": scores.astype(np.float64)[~dropped],
            "ep_length": lengths.astype(np.int64)[~dropped],
        }
        if observed is not None:
            arrays[OBSERVED] = observed
        return arrays, self.version

    def _scores(self, records: list[Any], texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Each response's reward: the rule's score (unless `reward` names a model
        alone), plus the reward model's times its weight; and which to drop (a
        failed score where `on_error = "drop"`)."""
        s, E = self.settings, len(texts)
        scores = np.zeros(E, np.float32)
        failed = np.zeros(E, bool)
        if s.rule == s.reward:  # a rule reward
            for j, (r, text) in enumerate(zip(records, texts, strict=True)):
                sc = self.venv(r.data_source, text, r.ground_truth, r.extra_info)
                failed[j] = sc is None
                scores[j] = sc or 0.0
        if s.reward_model_path:
            learned = model_scores([(r.messages, t) for r, t in zip(records, texts, strict=True)])
            if learned is None or len(learned) != E:
                self.venv.count_failure(E, "the reward model did not answer in time")
                failed[:] = True
            else:
                self.model_score_sum += float(learned.sum())
                self.model_scored += E
                weight = s.reward_model_weight if s.rule == s.reward else 1.0
                scores += weight * learned.astype(np.float32)
        return scores, failed & (self.venv.on_error == "drop")

    def metrics(self) -> dict[str, float]:
        out = {"timing_s/gen": round(self.gen_s, 3), "sampler/tokens": float(self.tokens),
               "sampler/reward_errors": float(self.venv.reward_errors)}
        if self.gen_s > 0:
            out["sampler/tokens_per_s"] = round(self.tokens / self.gen_s, 1)
        if self.model_scored:
            out["sampler/reward_model_score"] = round(self.model_score_sum / self.model_scored, 4)
        if self.tools:
            out["sampler/tool_calls"] = float(self.calls)
            out["sampler/tool_calls_well_formed"] = float(self.well_formed)
        if self.algo.device.type == "cuda":
            out["sampler/gpu_mem_peak_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
        return out

    def regroup(self, index: int, count: int) -> None:
        """The epoch's prompts are shared among the samplers alive now."""
        self.deck.regroup(index, count)

    def close(self) -> None:
        self.venv.close()

