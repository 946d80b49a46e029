"""`verl rm-train`: a reward model trained from a file, saved as a folder that
`reward = "model:PATH"` serves.

The file (.jsonl or .parquet) holds either preference pairs, `{"prompt",
"chosen", "rejected"}`, trained with the Bradley-Terry loss (-log sigmoid of
the chosen's reward minus the rejected's), or scored samples, `{"prompt",
"response", "score"}`, trained to the score (mean squared error). `prompt` is
a chat (a list of {role, content}) or a string. The model is a Hugging Face
sequence classifier with one label, built from a config (`model_type` and
sizes, a tiny Llama by default) with the given tokenizer, or read from a folder
to train further; it reads the prompt in its tokenizer's chat template, then
the response (`seq/reward_model.render`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .data import DataError, parse_chat, rows_of
from .reward_model import Chat, render

TINY = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
        "max_position_embeddings": 512}


@dataclass
class RMData:
    """A reward model's training rows: pairs or scored samples, never both."""

    pairs: list[tuple[Chat, str, str]]  # (chat, chosen, rejected)
    scored: list[tuple[Chat, str, float]]  # (chat, response, score)


def read_rm_data(path: str | Path) -> RMData:
    """The file's rows (the module says which); DataError naming the row otherwise."""
    p = Path(path)
    if not p.is_file():
        raise DataError(f"{p}: no such file")
    data = RMData([], [])
    for i, row in enumerate(rows_of(p)):
        def bad(column: str, what: str, i: int = i) -> DataError:
            return DataError(f"{p}: row {i}: column {column!r}: expected {what}")

        if not isinstance(row, dict):
            raise DataError(f"{p}: row {i}: expected a record (a JSON object)")
        chat = parse_chat(row.get("prompt"), lambda what: bad("prompt", what))
        if "chosen" in row or "rejected" in row:
            for k in ("chosen", "rejected"):
                if not isinstance(row.get(k), str):
                    raise bad(k, "a string (the response)")
            data.pairs.append((chat, row["chosen"], row["rejected"]))
        else:
            score = row.get("score")
            if not isinstance(row.get("response"), str):
                raise bad("response", "a string, or chosen and rejected strings (a pair)")
            if not isinstance(score, int | float) or not math.isfinite(score):
                raise bad("score", "a finite number")
            data.scored.append((chat, row["response"], float(score)))
    if data.pairs and data.scored:
        raise DataError(f"{p}: holds pairs (chosen, rejected) and scored samples "
                        f"(response, score); give one kind")
    if not data.pairs and not data.scored:
        raise DataError(f"{p}: no rows")
    return data


def build_reward_model(tok: Any, config: dict[str, Any] | None = None, start: str = "") -> Any:
    """A sequence classifier with one label: from `start` (a folder) or built from
    `config` (TINY by default) with the tokenizer's vocabulary and padding."""
    from transformers import AutoConfig, AutoModelForSequenceClassification

    if start:
        return AutoModelForSequenceClassification.from_pretrained(start, num_labels=1)
    cfg = dict(config or TINY)
    model_type = cfg.pop("model_type", "llama")
    conf = AutoConfig.for_model(model_type, vocab_size=len(tok), num_labels=1,
                                pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                                eos_token_id=tok.eos_token_id, **cfg)
    return AutoModelForSequenceClassification.from_config(conf)


@dataclass
class RMReport:
    """How training went: the steps, the last loss (the mean of the last tenth), and
    the training rows' accuracy (pairs: chosen above rejected) or correlation (scored)."""

    steps: int
    loss: float
    fit: float
    kind: str


def train_reward_model(data_path: str | Path, out: str | Path, tokenizer: str = "chars",
                       config: dict[str, Any] | None = None, start: str = "",
                       steps: int = 300, batch: int = 32, lr: float = 1e-3,
                       seed: int = 0) -> RMReport:
    """Train a reward model on the file at `data_path` and save it (with its
    tokenizer) to `out`."""
    import torch

    from .hf import char_tokenizer

    data = read_rm_data(data_path)
    torch.manual_seed(seed)
    if tokenizer == "chars":
        tok = char_tokenizer()
    else:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(tokenizer or start)
        if tok.pad_token_id is None:
            tok.pad_token = tok.eos_token
    tok.padding_side, tok.truncation_side = "right", "left"
    model = build_reward_model(tok, config, start)
    model.config.pad_token_id = tok.pad_token_id
    max_len = int(getattr(model.config, "max_position_embeddings", 0) or 4096)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    rng = np.random.default_rng(seed)

    def rewards(texts: list[str]) -> torch.Tensor:
        enc = tok(texts, return_tensors="pt", padding=True, truncation=True,
                  max_length=max_len, add_special_tokens=False)
        out: torch.Tensor = model(**enc).logits[:, 0]
        return out

    n = len(data.pairs) or len(data.scored)
    losses = []
    model.train()
    for _ in range(steps):
        idx = rng.choice(n, size=min(batch, n), replace=False)
        if data.pairs:
            rows = [data.pairs[i] for i in idx]
            r = rewards([render(tok, c, a) for c, a, _ in rows] +
                        [render(tok, c, b) for c, _, b in rows])
            loss = -torch.nn.functional.logsigmoid(r[:len(rows)] - r[len(rows):]).mean()
        else:
            srows = [data.scored[i] for i in idx]
            r = rewards([render(tok, c, a) for c, a, _ in srows])
            loss = ((r - torch.tensor([s for _, _, s in srows])) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    model.eval()
    fit = _fit(data, tok, rewards)
    Path(out).mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    tail = losses[-max(1, steps // 10):]
    return RMReport(steps, float(np.mean(tail)), fit, "pairs" if data.pairs else "scored")


def _fit(data: RMData, tok: Any, rewards: Any) -> float:
    """Pairs: the share whose chosen scores above its rejected; scored: the
    correlation of reward and score (0 where either is constant)."""
    import torch

    with torch.inference_mode():
        if data.pairs:
            got = [bool(rewards([render(tok, c, a), render(tok, c, b)]).diff()[0] < 0)
                   for c, a, b in data.pairs[:512]]
            return float(np.mean(got))
        rows = data.scored[:512]
        r = np.concatenate([rewards([render(tok, c, a) for c, a, _ in rows[lo:lo + 64]])
                            .numpy() for lo in range(0, len(rows), 64)])
        s = np.array([x for _, _, x in rows])
        if r.std() == 0 or s.std() == 0:
            return 0.0
        return float(np.corrcoef(r, s)[0, 1])
