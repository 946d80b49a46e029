"""A learned reward model: a local Hugging Face `AutoModelForSequenceClassification`
folder with one label, scoring a prompt and its response as one text, the
prompt rendered by the reward model's own chat template (as verl's reward-model
worker does: the policy's template may differ). Served by the reward-model role
(`roles/rewardmodel.py`); trained by `verl rm-train` (`seq/rm_train.py`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

Chat = Sequence[tuple[str, str]]  # (role, content) turns
MICRO_BATCH = 64  # texts in one forward pass


# where this process's responses go to be scored by the reward model: a sampler of a
# job with reward-model servers routes them there (`roles/rm_client.py`)
_route: Callable[[Sequence[tuple[Chat, str]]], np.ndarray | None] | None = None


def route_scores(fn: Callable[[Sequence[tuple[Chat, str]]], np.ndarray | None] | None) -> None:
    """Have `model_scores` ask `fn` (a role's way to the job's reward-model servers)."""
    global _route
    _route = fn


def model_scores(items: Sequence[tuple[Chat, str]]) -> np.ndarray | None:
    """The reward model's score of each (chat, response); None when no server answered
    in time. RuntimeError where this process has no way to the servers."""
    if _route is None:
        raise RuntimeError("no reward-model server is reachable from this process (the "
                           "launcher starts them: launch.reward_models)")
    return _route(items)


def check_reward_model(path: str, key: str) -> None:
    """ValueError naming `key` unless `path` is a local folder holding a sequence
    classifier with one label (read from its config.json, nothing imported)."""
    conf = Path(path) / "config.json"
    if not conf.is_file():
        raise ValueError(f"{key}: {path!r} is not a local model folder with a config.json "
                         f"(train one with `verl rm-train`)")
    try:
        c = json.loads(conf.read_text())
    except ValueError as e:
        raise ValueError(f"{key}: {conf}: not JSON ({e})") from None
    archs = c.get("architectures") or []
    if not any(a.endswith("ForSequenceClassification") for a in archs):
        raise ValueError(f"{key}: {path!r} is a {', '.join(archs) or 'model'}, not a "
                         f"sequence classifier (AutoModelForSequenceClassification)")
    labels = c.get("num_labels", len(c.get("id2label") or {}) or 2)
    if labels != 1:
        raise ValueError(f"{key}: {path!r} has {labels} labels; a reward model has one "
                         f"(num_labels = 1: its one logit is the reward)")


def render(tok: Any, chat: Chat, response: str) -> str:
    """What the reward model reads: the prompt in its own chat template (with the
    assistant's turn opened), then the response."""
    from .data import chat_prompt

    return chat_prompt(chat, tok) + response


class RewardModel:
    """A reward model in eval mode, scoring texts in micro-batches."""

    def __init__(self, path: str, device: str = "cpu"):
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        self.tok = AutoTokenizer.from_pretrained(path)
        if self.tok.pad_token_id is None:
            self.tok.pad_token = self.tok.eos_token
        self.tok.padding_side = "right"
        self.tok.truncation_side = "left"  # a text too long keeps its response
        self.model = AutoModelForSequenceClassification.from_pretrained(
            path, use_safetensors=True).to(device).eval()
        self.model.config.pad_token_id = self.tok.pad_token_id
        self.device = torch.device(device)
        self.max_len = int(getattr(self.model.config, "max_position_embeddings", 0) or 4096)

    def score(self, items: Sequence[tuple[Chat, str]]) -> np.ndarray:
        """Each (chat, response)'s reward: the model's one logit."""
        import torch

        texts = [render(self.tok, chat, response) for chat, response in items]
        out = np.zeros(len(texts), np.float32)
        with torch.inference_mode():
            for lo in range(0, len(texts), MICRO_BATCH):
                enc = self.tok(texts[lo:lo + MICRO_BATCH], return_tensors="pt", padding=True,
                               truncation=True, max_length=self.max_len,
                               add_special_tokens=False).to(self.device)
                logits = self.model(**enc).logits[:, 0]
                out[lo:lo + len(logits)] = logits.float().cpu().numpy()
        return out


def encode_items(items: Sequence[tuple[Chat, str]]) -> np.ndarray:
    """(chat, response) pairs as the wire carries them: UTF-8 JSON in a uint8 array
    (texts of any length; a string field holds 4 KB)."""
    body = json.dumps([[[list(t) for t in chat], response] for chat, response in items])
    return np.frombuffer(body.encode(), np.uint8)


def decode_items(arr: np.ndarray) -> list[tuple[Chat, str]]:
    """`encode_items` read back; ValueError on anything else."""
    try:
        rows = json.loads(arr.tobytes().decode())
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"not UTF-8 JSON: {e}") from None
    out: list[tuple[Chat, str]] = []
    for row in rows if isinstance(rows, list) else [None]:
        ok = isinstance(row, list) and len(row) == 2 and isinstance(row[1], str) \
            and isinstance(row[0], list) and all(
                isinstance(t, list) and len(t) == 2 and all(isinstance(x, str) for x in t)
                for t in row[0])
        if not ok:
            raise ValueError("expected [[[role, content], ...], response] rows")
        out.append(([(r, c) for r, c in row[0]], row[1]))
    return out
