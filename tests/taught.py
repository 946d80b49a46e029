"""A tiny Hugging Face policy taught one demonstration with tool calls (the
calculator job's model, overfit): what the multi-turn tests roll out, as a
model of the job's own that calls its tools as the demonstration did."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from tests.conftest import CONFIGS
from verl_zmq.config import load_job
from verl_zmq.seq.hf import pad_left, response_logprobs
from verl_zmq.seq.hf_sft import _tokens
from verl_zmq.seq.toy_prompts import write_prompts

TINY = ('algorithm.policy.config={{model_type="llama",hidden_size={h},intermediate_size={i},'
        'num_hidden_layers={n},num_attention_heads=2,num_key_value_heads=1,'
        'max_position_embeddings={p}}}')


def build(folder: Path, row: dict[str, Any], R: int, *sets: str, kl: float = 0.0,
          hidden: int = 32, layers: int = 1) -> Any:
    """The calculator job's algorithm on `row` alone, `R` tokens a response, its
    model tiny (`hidden`, `layers`); `sets` are more overrides."""
    from verl_zmq.algos import make_algorithm
    from verl_zmq.envs.make import env_spec

    path = write_prompts(folder / "one.jsonl", [row])
    job = load_job(CONFIGS / "calc_hf_grpo.toml", [
        f"environment.kwargs.train_files={path}", "environment.kwargs.val_files=",
        f"environment.kwargs.max_response_length={R}", f"sampling.fragment_length={R}",
        "sampling.num_envs_per_worker=8", "environment.kwargs.group_size=4",
        f"algorithm.params.batch_size={8 * R}", f"algorithm.params.minibatch_size={8 * R}",
        f"algorithm.params.kl_coef={kl}", "algorithm.params.learning_rate=1e-3",
        TINY.format(h=hidden, i=2 * hidden, n=layers, p=R + 32), *sets])
    torch.manual_seed(0)
    return make_algorithm(job, env_spec(job.environment))


def teach(algo: Any, row: dict[str, Any], steps: int = 150, lr: float = 1e-2) -> list[int]:
    """Overfit the model on the row's demonstration (`extra_info.answer`, tool answers
    left out of the loss); the prompt's tokens."""
    prompt = algo.tok(algo.tok.apply_chat_template(row["prompt"], tokenize=False,
                                                   add_generation_prompt=True),
                      add_special_tokens=False).input_ids
    ids, keep = _tokens(algo.tok, row["extra_info"]["answer"], tools=True)
    ids, keep = ids + [algo.eos], keep + [1]
    p, pm = pad_left([prompt], algo.pad)
    resp, rm = torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.long)
    lm = torch.tensor([keep], dtype=torch.float32)
    opt = torch.optim.Adam(algo.model.parameters(), lr=lr)
    algo.model.train(False)
    for _ in range(steps):
        loss = -(response_logprobs(algo.model, p, pm, resp, rm) * lm).sum() / lm.sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return prompt
