"""Hugging Face causal LMs as policies (the `llm` extra): the model and its
tokenizer, log-probabilities of responses, and rollout by `generate`.

The conventions every part shares, so that a sampler's behaviour
log-probabilities and the learner's agree (to 1e-5, tested):

- prompts are left-padded, responses right-padded, with `pad_token_id`; the
  attention mask marks real tokens, and positions come from it (the cumulative
  sum less one), as `generate` computes them. Without those positions a
  left-padded prompt would be read at shifted positions by the learner.
- models run in eval mode: dropout off (a model built from a config starts in
  training mode; its dropout makes two passes over one sequence disagree).
- a token's log-probability is `log_softmax(logits / temperature)` at it: the
  sampling temperature's distribution, as verl's actor computes it; top-p and
  top-k only choose which tokens may be drawn.

The built-in character tokenizer (`tokenizer = "chars"`) needs no download: one
token per printable ASCII character, with a chat template, for tests and toy
tasks.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

__all__ = ["Sampling", "build_model", "char_tokenizer", "draw", "generate", "load_tokenizer",
           "pad_left", "response_logprobs", "response_logprobs_entropy"]

CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>"
                 "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}")
SPECIAL = ("<pad>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>",
           "<|tool|>")


def char_tokenizer() -> Any:
    """One token per printable ASCII character (and newline), the special tokens of
    `SPECIAL`, and a chat template: a tokenizer built offline from `tokenizers`."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = [chr(c) for c in range(32, 127)] + ["\n"]
    vocab = {t: i for i, t in enumerate((*SPECIAL, *chars))}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="?"))
    tk.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tk.decoder = decoders.Fuse()
    tk.add_special_tokens([AddedToken(s, special=True) for s in SPECIAL])
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", bos_token="<s>",
                                  eos_token="</s>")
    tok.chat_template = CHAT_TEMPLATE
    tok.padding_side = "left"
    return tok


def load_tokenizer(policy: Any) -> Any:
    """The job's tokenizer: "chars" (built in), a folder, or the model folder's own;
    left padding, and the end token as padding where it has no pad token."""
    name = policy.tokenizer or policy.path
    if not name:
        raise ValueError("algorithm.policy: kind = \"hf\" needs a tokenizer (a folder, or "
                         "\"chars\") or a model folder (path) that has one")
    if name == "chars":
        return char_tokenizer()
    from transformers import AutoTokenizer

    if not Path(name).is_dir():
        raise ValueError(f"algorithm.policy.tokenizer: {name!r} is not a local folder "
                         f"(models and tokenizers are read from disk, never downloaded)")
    tok = AutoTokenizer.from_pretrained(name)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


def save_folder(model: Any, tok: Any, lora: bool, folder: Path) -> None:
    """A Hugging Face folder that `AutoModelForCausalLM.from_pretrained` loads:
    weights (safetensors), config, tokenizer (padding on the left) and chat
    template; with LoRA the adapters merged into a copy of the model."""
    if lora:
        model = copy.deepcopy(model).merge_and_unload()
    if model.dtype != torch.float32:  # the folder is read as it was trained
        model.config.torch_dtype = model.dtype
    model.save_pretrained(folder, safe_serialization=True)
    # left padding written into tokenizer_config.json: a plain batched `generate`
    # from this folder reads prompts as the samplers and the evaluator do
    tok.init_kwargs["padding_side"] = "left"
    tok.save_pretrained(folder)


def build_model(policy: Any, tok: Any) -> Any:
    """The job's causal LM in eval mode: from `path` (a local Hugging Face folder), or
    built from the inline `config` (`model_type` and sizes) with the tokenizer's
    vocabulary and special tokens; LoRA adapters on it when `lora_rank` > 0."""
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a role's stderr is a log, not a terminal

    dtype = getattr(torch, getattr(policy, "dtype", "float32"))
    if policy.path:
        if not Path(policy.path).is_dir():
            raise ValueError(f"algorithm.policy.path: {policy.path!r} is not a local folder")
        model = AutoModelForCausalLM.from_pretrained(policy.path, dtype=dtype)
    else:
        cfg = dict(policy.config)
        model_type = cfg.pop("model_type", None)
        if not model_type:
            raise ValueError("algorithm.policy.config: needs model_type (e.g. \"llama\", "
                             "\"gpt2\") and its sizes, or give algorithm.policy.path")
        try:
            conf = AutoConfig.for_model(model_type, vocab_size=len(tok),
                                        pad_token_id=tok.pad_token_id,
                                        bos_token_id=tok.bos_token_id,
                                        eos_token_id=tok.eos_token_id, **cfg)
        except (ValueError, TypeError) as e:
            raise ValueError(f"algorithm.policy.config: {e}") from None
        model = AutoModelForCausalLM.from_config(conf).to(dtype)
    if getattr(policy, "gradient_checkpointing", False):
        # checkpointing runs in training mode alone (transformers' rule): dropout is
        # turned off instead, so that training mode computes what eval mode does
        for m in model.modules():
            if isinstance(m, torch.nn.Dropout):
                m.p = 0.0
        for key in ("attention_dropout", "attn_pdrop", "resid_pdrop", "embd_pdrop",
                    "hidden_dropout", "dropout"):
            if isinstance(getattr(model.config, key, None), float):
                setattr(model.config, key, 0.0)
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if policy.lora_rank > 0:
        from peft import LoraConfig, get_peft_model

        targets = policy.target_modules
        model = get_peft_model(model, LoraConfig(
            r=policy.lora_rank, lora_alpha=policy.lora_alpha, lora_dropout=0.0,
            target_modules=targets if isinstance(targets, str) else (list(targets) or None),
            task_type="CAUSAL_LM"))
    return model.eval()


def model_positions(policy: Any) -> int | None:
    """How many positions the job's model has (`max_position_embeddings`, or GPT-2's
    `n_positions`), read from its config alone; None where it says none."""
    conf: dict[str, Any] = dict(policy.config)
    if policy.path:
        import json

        try:
            conf = json.loads((Path(policy.path) / "config.json").read_text())
        except (OSError, ValueError):
            return None
    for key in ("max_position_embeddings", "n_positions"):
        if isinstance(conf.get(key), int):
            return int(conf[key])
    if not policy.path and conf.get("model_type"):  # the model type's default
        from transformers import AutoConfig

        try:
            model_type = conf.pop("model_type")
            built = AutoConfig.for_model(model_type, **conf)
        except (ValueError, TypeError):
            return None
        for key in ("max_position_embeddings", "n_positions"):
            if isinstance(getattr(built, key, None), int):
                return int(getattr(built, key))
    return None


def pad_left(rows: Sequence[Sequence[int]], pad: int, width: int | None = None
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """Token rows left-padded to `width` (the longest by default): ids, mask."""
    width = width or max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            ids[i, width - len(r):] = torch.as_tensor(list(r))
            mask[i, width - len(r):] = 1
    return ids, mask


def response_logprobs(model: Any, prompt: torch.Tensor, prompt_mask: torch.Tensor,
                      response: torch.Tensor, response_mask: torch.Tensor,
                      temperature: float = 1.0) -> torch.Tensor:
    """log pi(response token | everything before it) [N, R] for left-padded prompts
    [N, P] and right-padded responses [N, R] (0 where `response_mask` is 0), in
    one forward pass; differentiable."""
    return response_logprobs_entropy(model, prompt, prompt_mask, response, response_mask,
                                     temperature, entropy=False)[0]


def response_logprobs_entropy(model: Any, prompt: torch.Tensor, prompt_mask: torch.Tensor,
                              response: torch.Tensor, response_mask: torch.Tensor,
                              temperature: float = 1.0, entropy: bool = True
                              ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`response_logprobs`, and with `entropy` the entropy [N, R] of the
    temperature's distribution at each response position (differentiable: an
    entropy bonus); the entropy costs one more [N, R, vocab] tensor."""
    logp, ent, _ = response_forward(model, prompt, prompt_mask, response, response_mask,
                                    temperature, entropy)
    return logp, ent


def response_forward(model: Any, prompt: torch.Tensor, prompt_mask: torch.Tensor,
                     response: torch.Tensor, response_mask: torch.Tensor,
                     temperature: float = 1.0, entropy: bool = True, hidden: bool = False
                     ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """`response_logprobs_entropy`, and with `hidden` the last layer's state [N, R, H]
    where each response token is drawn (what a value head reads: the state before
    the token)."""
    dev = _device(model)  # the model's device (a learner's GPU); the result stays there
    response_mask = response_mask.to(dev)
    ids = torch.cat([prompt.to(dev), response.to(dev)], 1)
    mask = torch.cat([prompt_mask.to(dev), response_mask], 1)
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    P = prompt.shape[1]
    got = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False,
                output_hidden_states=hidden)
    logp = torch.log_softmax(got.logits[:, P - 1:-1].float() / temperature, -1)
    out = logp.gather(-1, response.unsqueeze(-1)).squeeze(-1)
    ent = -(logp.exp() * logp).sum(-1) * response_mask if entropy else None
    h = got.hidden_states[-1][:, P - 1:-1] if hidden else None
    return out * response_mask, ent, h


@dataclass(frozen=True)
class Sampling:
    """How responses are drawn: verl's rollout `n` (the group), `temperature`,
    `top_p`, `top_k` (0: off) and the response length; `greedy` for validation."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 64
    greedy: bool = False


@dataclass
class Generated:
    """Responses [N * n, R] (right-padded with the pad token), their mask, whether
    each ended with the end token, and each token's behaviour log-probability."""

    response: torch.Tensor
    mask: torch.Tensor
    ended: torch.Tensor
    logp: torch.Tensor

    def lengths(self) -> torch.Tensor:
        return self.mask.sum(1)


def draw(model: Any, prompt: torch.Tensor, prompt_mask: torch.Tensor, s: Sampling,
         eos: int, pad: int, max_new: int, stop: Any = None
         ) -> tuple[torch.Tensor, torch.Tensor]:
    """The tokens `generate` draws after each left-padded prompt row (`s.n` of them a
    prompt, rows of a prompt together) and each one's log-probability, on the CPU
    as drawn: up to `max_new` a row, a finished row padded (the end token, or
    `stop`, a stopping criterion, said it was done)."""
    from transformers import GenerationConfig, StoppingCriteriaList

    dev = _device(model)
    prompt, prompt_mask = prompt.to(dev), prompt_mask.to(dev)
    n = 1 if s.greedy else s.n
    gc = GenerationConfig(do_sample=not s.greedy, max_new_tokens=max_new,
                          pad_token_id=pad, eos_token_id=eos,
                          temperature=s.temperature if not s.greedy else None,
                          top_p=s.top_p if not s.greedy else None,
                          top_k=(s.top_k or None) if not s.greedy else None,
                          output_logits=True, return_dict_in_generate=True)
    with torch.no_grad():
        out = model.generate(input_ids=prompt.repeat_interleave(n, 0),
                             attention_mask=prompt_mask.repeat_interleave(n, 0),
                             generation_config=gc,
                             stopping_criteria=StoppingCriteriaList([stop] if stop else []))
    resp = out.sequences[:, prompt.shape[1]:]
    logits = torch.stack(out.logits, 1).float() / (1.0 if s.greedy else s.temperature)
    logp = torch.log_softmax(logits, -1).gather(-1, resp.unsqueeze(-1)).squeeze(-1)
    return resp.cpu(), logp.cpu()


def generate(model: Any, prompt: torch.Tensor, prompt_mask: torch.Tensor, s: Sampling,
             eos: int, pad: int) -> Generated:
    """`s.n` responses to each left-padded prompt (rows of the same prompt together),
    with the model's KV cache, stopping at `eos` or `s.max_new_tokens`; the
    log-probabilities come from the logits each step computed. Generated on the
    model's device (a sampler's GPU); returned on the CPU, where it is shipped."""
    resp, logp = draw(model, prompt, prompt_mask, s, eos, pad, s.max_new_tokens)
    is_eos = resp == eos
    before = is_eos.long().cumsum(1) - is_eos.long()  # end tokens strictly before
    mask = (before == 0).long()  # up to and including the first end token
    resp = torch.where(mask.bool(), resp, torch.full_like(resp, pad))
    logp = logp * mask
    R = s.max_new_tokens
    if resp.shape[1] < R:  # every response ended early
        extra = R - resp.shape[1]
        resp = torch.nn.functional.pad(resp, (0, extra), value=pad)
        mask = torch.nn.functional.pad(mask, (0, extra))
        logp = torch.nn.functional.pad(logp, (0, extra))
    ended = (is_eos & mask.bool()[:, :is_eos.shape[1]]).any(1)
    return Generated(resp, mask, ended, logp)


def _device(model: Any) -> torch.device:
    return next(model.parameters()).device


def named_arrays(model: Any, adapters_only: bool) -> dict[str, Any]:
    """The model's weights as numpy arrays by name: all of them, or with LoRA only
    the adapters (what changes; the base stays as every copy loaded it)."""
    sd = _wired(model, adapters_only)
    # copies (also of float32 weights on the CPU, which `.float().cpu()` would
    # return as they are): a message holding them may wait to be sent while the
    # next update changes the model
    return {k: v.detach().to("cpu", torch.float32, copy=True).numpy() for k, v in sd.items()}


BF16_BUCKET = "bf16_bucket"


def _wired(model: Any, adapters_only: bool) -> dict[str, torch.Tensor]:
    sd = model.state_dict()
    return {k: v for k, v in sd.items() if "lora_" in k} if adapters_only else sd


def wire_bytes(model: Any, adapters_only: bool) -> int:
    """The array bytes of the params this model's learner sends (`named_arrays`
    in float32, or one `bf16_bucket`)."""
    size = 2 if model.dtype == torch.bfloat16 else 4
    return size * sum(v.numel() for v in _wired(model, adapters_only).values())


def bf16_bucket(model: Any, adapters_only: bool) -> dict[str, Any]:
    """The weights `named_arrays` would carry as one flat bfloat16 bucket (its bits
    as uint16: the wire's dtypes have no bfloat16), in the model's state-dict
    order: half the bytes of float32, one frame instead of one per tensor."""
    flat = torch.cat([v.detach().to("cpu", torch.bfloat16).reshape(-1)
                      for v in _wired(model, adapters_only).values()])
    return {BF16_BUCKET: flat.view(torch.int16).numpy().view("<u2").copy()}


def load_named_arrays(model: Any, arrays: Mapping[str, Any], adapters_only: bool) -> None:
    """Load `named_arrays` (or a `bf16_bucket`) into a model of the same shape;
    ValueError when they do not fit."""
    import numpy as np

    if BF16_BUCKET in arrays:
        own_w = _wired(model, adapters_only)
        bits = np.asarray(arrays[BF16_BUCKET])
        need = sum(v.numel() for v in own_w.values())
        if bits.dtype != np.uint16 or bits.ndim != 1 or bits.size != need:
            raise ValueError(f"params {BF16_BUCKET}: {bits.size} {bits.dtype} values, this "
                             f"model takes {need} bfloat16")
        flat = torch.from_numpy(bits.astype(np.int16, copy=False)).view(torch.bfloat16)
        with torch.no_grad():
            at = 0
            for v in own_w.values():
                v.copy_(flat[at:at + v.numel()].view(v.shape))
                at += v.numel()
        return
    own = model.state_dict()
    names = [k for k in own if "lora_" in k] if adapters_only else list(own)
    missing = [k for k in names if k not in arrays]
    if missing:
        raise ValueError(f"params lack {missing[:3]}")
    with torch.no_grad():
        for k in names:
            if tuple(arrays[k].shape) != tuple(own[k].shape):
                raise ValueError(f"params {k}: shape {arrays[k].shape} != {tuple(own[k].shape)}")
            own[k].copy_(torch.from_numpy(np.array(arrays[k], dtype=np.float32)))
