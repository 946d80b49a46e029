"""GRPO on a Hugging Face causal LM: the learner, the evaluator's validation (run
by `seq/hf_validation.py`) and the sampler's model copy for prompt jobs
(`seq/prompts.py`).

The update is the one `algos/ppo.py` composes for GRPO, from the same
registered functions of `algos/core.py` and `algos/grouped.py` (advantage
estimator, clipped surrogate with dual clip, loss aggregation, KL estimator and
controller), with one difference of form: a fragment's column is one whole
response, so the current policy's log-probabilities of a minibatch of responses
come from one forward pass over prompt + response (`hf.response_logprobs`),
not one pass per token.

The behaviour log-probabilities are the samplers' (from `generate`'s logits);
the reference is a frozen copy of the initial model, or with LoRA the model with
its adapters disabled (no second copy).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..algos.base import (
    START,
    Algorithm,
    FragmentFilter,
    Learned,
    Progress,
    adam,
    clip_grad_norm,
    scheduled,
    step_if_finite,
)
from ..algos.core import (
    ADVANTAGE_ESTIMATORS,
    AGGREGATIONS,
    KL_ESTIMATORS,
    POLICY_LOSSES,
    AdvantageInput,
    KLController,
    lookup,
)
from ..algos.grouped import response_stats, responses  # noqa: F401  (registers estimators)
from ..algos.grpo import keep_groups
from ..algos.update import behaviour_weighted, clip_stats, kl_loss, kl_to_reference
from ..batch import OBSERVED, PROMPT, episodes
from ..config import GRPOParams
from ..wire import allow_params_of
from .hf import (
    Sampling,
    bf16_bucket,
    build_model,
    load_named_arrays,
    load_tokenizer,
    named_arrays,
    response_forward,
    response_logprobs,
    save_folder,
    wire_bytes,
)
from .hf_batch import Responses, micro_batches, prompt_tensors
from .hf_critic import ValueHead, value_loss, whiten
from .hf_validation import Validation
from .prompts import prompt_settings

__all__ = ["HFGRPO"]

Arrays = Mapping[str, np.ndarray]


class HFGRPO(Algorithm[GRPOParams]):
    """GRPO (and verl's estimators and options) on a Hugging Face model (see the
    module); also the samplers' and the evaluator's copy of the model."""

    name = "grpo"
    state_attrs = ("model", "opt", "ref", "critic")

    def __init__(self, job: Any, spec: Any, device: str = "cpu", **kw: Any):
        super().__init__(job, spec, device, **kw)
        p, pol = self.params, job.algorithm.policy
        self.settings = prompt_settings(job.environment.kwargs)
        self.tok = load_tokenizer(pol)
        self.model = build_model(pol, self.tok).to(self.device)
        self.lora = pol.lora_rank > 0
        allow_params_of(wire_bytes(self.model, self.lora))  # each copy takes its own size
        self.checkpointing = pol.gradient_checkpointing
        self.vocab = int(self.model.get_output_embeddings().weight.shape[0])
        self.pad = int(self.tok.pad_token_id)
        self.eos = int(self.tok.eos_token_id)
        self.advantage_fn = lookup(ADVANTAGE_ESTIMATORS, p.adv_estimator,
                                   "algorithm.params.adv_estimator")
        self.policy_loss_fn = lookup(POLICY_LOSSES, self.params.policy_loss or "clipped",
                                     "algorithm.params.policy_loss")
        self.aggregate = lookup(AGGREGATIONS, p.loss_agg, "algorithm.params.loss_agg")
        self.kl_fn = lookup(KL_ESTIMATORS, p.kl_estimator, "algorithm.params.kl_estimator")
        self.kl_ctl = KLController(p.kl_coef, p.kl_ctrl, p.kl_target, p.kl_horizon)
        self.group_size = self.settings.group_size
        self.max_response = self.settings.max_response_length
        self.horizon = float(p.loss_scale_factor or self.max_response)
        self.filter_stats: dict[str, float] = {}
        self.init_policy()
        self.ref: torch.nn.Module | None = None
        if p.kl_coef > 0 and not self.lora:
            self.ref = copy.deepcopy(self.model).requires_grad_(False).eval()
        # a value head (PPO, verl's adv_estimator = "gae") on the last hidden state
        self.critic: ValueHead | None = None
        if p.adv_estimator == "gae":
            if p.vf_coef <= 0:
                raise ValueError("algorithm.params.vf_coef: adv_estimator = \"gae\" trains a "
                                 "value head, weighted by vf_coef; set it above 0 (PPO's 0.5)")
            hidden = int(self.model.get_output_embeddings().weight.shape[1])
            self.critic = ValueHead(hidden).to(self.device)
        self.opt = adam([t for t in self.trained() if t.requires_grad], p.learning_rate)
        self._val: Validation | None = None
        self.val_metrics: dict[str, float] = {}

    # -- the model's weights ---------------------------------------------------------

    def policy_module(self) -> torch.nn.Module:
        module: torch.nn.Module = self.model
        return module

    def policy_arrays(self) -> dict[str, np.ndarray]:
        return named_arrays(self.model, self.lora)

    def wire_arrays(self) -> dict[str, np.ndarray]:
        """bfloat16 weights (`dtype = "bfloat16"`) travel as one bfloat16 bucket."""
        if self.model.dtype == torch.bfloat16:
            return bf16_bucket(self.model, self.lora)
        return self.policy_arrays()

    def load_policy_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        load_named_arrays(self.model, arrays, self.lora)

    def save_pretrained(self, folder: Path) -> None:
        """A Hugging Face folder that `AutoModelForCausalLM.from_pretrained` loads
        (`hf.save_folder`)."""
        save_folder(self.model, self.tok, self.lora, folder)

    def _reference(self) -> contextlib.AbstractContextManager[Any]:
        """The reference policy to run under: the frozen copy, or the adapters off."""
        if self.lora:
            cm: contextlib.AbstractContextManager[Any] = self.model.disable_adapter()
            return cm
        return contextlib.nullcontext()

    # -- acting: samplers and the evaluator generate whole responses -----------------

    def act(self, obs: np.ndarray, deterministic: bool = False, env_steps: int = 0,
            state: Any = None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        raise TypeError("a Hugging Face policy generates whole responses (seq/generate.py), "
                        "it does not act step by step")

    def sampling(self, greedy: bool = False) -> Sampling:
        s = self.settings
        return Sampling(n=s.group_size, temperature=s.temperature, top_p=s.top_p,
                        top_k=s.top_k, max_new_tokens=s.max_response_length, greedy=greedy)

    def validate(self, limit: int = 0) -> np.ndarray:
        """Each val prompt's score (seq/hf_validation.py); verl's `val-core` metrics
        in `val_metrics`."""
        if self._val is None:
            self._val = Validation(self.settings, self.tok)
        per_prompt, self.val_metrics = self._val.run(self.model, self.decode, self.pad,
                                                     self.eos, limit)
        return per_prompt

    def decode(self, response: torch.Tensor, mask: torch.Tensor) -> list[str]:
        """Responses as text, without the end token and padding."""
        out = []
        for row, m in zip(response.tolist(), mask.tolist(), strict=True):
            toks = [t for t, keep in zip(row, m, strict=True) if keep and t != self.eos]
            out.append(self.tok.decode(toks, skip_special_tokens=True))
        return out

    # -- learning --------------------------------------------------------------------

    def fragment_filter(self) -> FragmentFilter | None:
        if not self.params.filter_groups:
            return None
        return lambda frag: keep_groups(frag, self.params, self.group_size, self.max_response,
                                        self.filter_stats)

    def trained(self) -> list[torch.Tensor]:
        """What the optimiser steps: the model's parameters and the value head's."""
        head = list(self.critic.parameters()) if self.critic is not None else []
        return [*self.model.parameters(), *head]

    def _forward(self, prompt: torch.Tensor, pmask: torch.Tensor, resp: torch.Tensor,
                 rmask: torch.Tensor, entropy: bool = False
                 ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """The responses' log-probabilities, entropies (where asked) and values (with a
        value head: the trunk held during the critic's warm-up)."""
        logp, ent, h = response_forward(self.model, prompt, pmask, resp, rmask,
                                        self.settings.temperature, entropy,
                                        hidden=self.critic is not None)
        if self.critic is None or h is None:
            return logp, ent, None
        warm = self.updates < self.params.critic_warmup
        return logp, ent, self.critic(h.detach() if warm else h) * rmask.to(h.device)

    def _minibatches(self, counted: np.ndarray, tokens: np.ndarray) -> Iterator[np.ndarray]:
        """Shuffled responses (those counted), about `minibatch_size` tokens each."""
        rows = np.flatnonzero(counted)
        order = rows[torch.randperm(len(rows)).numpy()]
        per = max(1, round(len(rows) * self.params.minibatch_size / max(int(tokens.sum()), 1)))
        for lo in range(0, len(order), per):
            yield order[lo:lo + per]

    def _prepare(self, batch: Arrays) -> Responses:
        """A batch's responses as tensors [N, ...], their advantages (the job's
        estimator), the reference's log-probabilities, and what was counted."""
        p = self.params
        term = np.asarray(batch["terminated"], bool)
        trunc = np.asarray(batch["truncated"], bool)
        valid = np.asarray(batch["valid"], bool)
        act = np.asarray(batch["action"], np.int64)
        # a token id the model has no embedding for: its response is left out (counted)
        bad = ((act < 0) | (act >= self.vocab)) & valid
        stats: dict[str, float] = {"grpo/bad_token_responses": float(bad.any(0).sum())}
        if bad.any():
            trunc = trunc | (bad.any(0)[None] & valid & (term | trunc))
            term = term & ~bad.any(0)[None]
            act = np.where(bad, 0, act)
        ordinal, how = episodes(term, trunc, valid)
        # tool answers (multi-turn) are attended to (rmask), never learned from or in a KL
        model = valid & ~np.asarray(batch[OBSERVED], bool) if OBSERVED in batch else valid
        prompt, pmask = prompt_tensors(batch[PROMPT], self.pad)
        resp = torch.as_tensor(np.where(valid, act, self.pad).T.copy())
        rmask = torch.as_tensor(valid.T.astype(np.int64))
        b = {**batch, "terminated": term, "truncated": trunc}
        ref = None
        if p.kl_coef > 0:
            with torch.no_grad(), self._reference(), self.autocast():
                net = self.ref if self.ref is not None else self.model
                ref = response_logprobs(net, prompt, pmask, resp, rmask,
                                        self.settings.temperature).float().cpu().numpy().T
            b, stats["charts/kl_ref"] = kl_to_reference(b, ref, model, self.kl_ctl, p.kl_in)
        prox = None
        if p.decoupled_loss or self.critic is not None:  # one pass as the update begins:
            with torch.no_grad(), self.autocast():  # the clip's anchor, GAE's values
                logp, _, v = self._forward(prompt, pmask, resp, rmask)
            prox = logp.float() if p.decoupled_loss else None
            if v is not None:  # a value head's
                b["value"] = v.float().cpu().numpy().T
                b["bootstrap_value"] = np.zeros(valid.shape[1], np.float32)
        est = self.advantage_fn(AdvantageInput(b, p, _no_values, ordinal, how,
                                               self.group_size, self.max_response))
        counted = how[:, 0] == 1  # one response per column: its first episode
        critic = {} if self.critic is None else {
            "ret": self.to_device(np.asarray(est.ret, np.float32).T.copy()),
            "value": self.to_device(np.asarray(est.value, np.float32).T.copy())}
        if self.critic is not None:
            est.adv = whiten(est.adv, model & counted[None])
        return Responses(prompt, pmask, resp, rmask,
                      old=self.to_device(np.asarray(batch["logp"], np.float32).T.copy()),
                      adv=self.to_device(np.asarray(est.adv, np.float32).T.copy()),
                      ref=self.to_device(ref.T.copy()) if ref is not None else None,
                      learn=(model & counted[None]).T, counted=counted,
                      stats={**stats, **est.stats}, prox=prox, **critic)

    def _step(self, r: Responses, idx: np.ndarray, params: list[torch.Tensor]
              ) -> dict[str, float]:
        """One optimiser step on the responses `idx`, computed in micro-batches whose
        gradients add up to the whole minibatch's: each micro-batch's loss is
        weighed by its share of what the aggregation averages over (tokens for
        token-mean, responses otherwise); its statistics."""
        p = self.params
        low, high = p.clip_low, p.clip_high
        per_token = p.loss_agg in ("token-mean", "step-mean")
        learn = r.learn[idx]
        whole = float(learn.sum() if per_token else learn.any(1).sum())
        self.opt.zero_grad(set_to_none=True)
        totals: dict[str, torch.Tensor] = {}
        seen: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        for mi in micro_batches(r, idx, p.micro_batch_size, p.max_tokens_per_forward):
            ml = r.learn[mi]
            share = float(ml.sum() if per_token else ml.any(1).sum()) / max(whole, 1.0)
            if share == 0:
                continue  # nothing learned from these responses
            loss, stats, seen_mb = self._loss(r, mi, self.to_device(ml))
            (loss * share).backward()  # type: ignore[no-untyped-call]
            for k, x in stats.items():
                totals[k] = totals.get(k, 0.0) + x * share
            seen.append(seen_mb)
        if not seen:
            return {}
        norm = clip_grad_norm(params, p.max_grad_norm)
        step_if_finite(self.opt, norm)
        new_f, old_f, ratio = (torch.cat(t) for t in zip(*seen, strict=True))
        totals["losses/grad_norm"] = norm
        totals |= clip_stats(new_f, old_f, ratio, low, high, verl_names=True)
        return {k: float(v) for k, v in totals.items()}

    def _loss(self, r: Responses, mi: np.ndarray, m: torch.Tensor
              ) -> tuple[torch.Tensor, dict[str, Any], tuple[torch.Tensor, ...]]:
        """One micro-batch's loss (policy, entropy bonus, KL, value), its statistics,
        and the log-probabilities and ratios the clip statistics read."""
        p = self.params
        at = torch.as_tensor(mi).to(self.device)
        with self.autocast():  # forward pass and loss; backward and step in float32
            new, ent, v = self._forward(r.prompt[mi], r.pmask[mi], r.resp[mi], r.rmask[mi],
                                        p.ent_coef > 0)
            mb = {"seq": at[:, None].expand_as(m)[m]}
            # the clip's anchor: the behaviour policy, or (decoupled) the policy as the
            # update began, each token then weighted by it over the behaviour's
            new_f, behav, adv_f = new[m], r.old[at][m], r.adv[at][m]
            old_f = r.prox[at][m] if r.prox is not None else behav
            pg, ratio = self.policy_loss_fn(new_f, old_f, adv_f, p.clip_low, p.clip_high,
                                            p.clip_ratio_c)
            stats: dict[str, Any] = {}
            if r.prox is not None:
                pg = behaviour_weighted(pg, old_f, behav, p.behav_imp_weight_cap, stats)
            loss = self.aggregate(pg, mb, self.horizon)
            stats["losses/policy_loss"] = loss.detach()
            if ent is not None:  # verl's entropy_coeff: a bonus on the same aggregation
                entropy = self.aggregate(ent[m], mb, self.horizon)
                stats["losses/entropy"] = stats["actor/entropy"] = entropy.detach()
                loss = loss - p.ent_coef * entropy
            if r.ref is not None and p.kl_in == "loss":
                loss = loss + kl_loss(self.kl_fn, self.aggregate, self.kl_ctl, new_f,
                                      r.ref[at][m], mb, self.horizon, stats)
            if v is not None and r.ret is not None and r.value is not None:
                vl = self.aggregate(value_loss(v[m], r.value[at][m], r.ret[at][m],
                                               p.clip_range_vf), mb, self.horizon)
                stats["losses/value_loss"] = vl.detach()
                # the critic's warm-up: its loss alone (the actor waits)
                keep = float(self.updates >= p.critic_warmup)
                loss = keep * loss + p.vf_coef * vl
        return loss, stats, (new_f.detach(), old_f, ratio.detach())

    def _lr(self, at: Progress) -> float:
        """The step size of this update: `lr_schedule` over the budget, after
        `lr_warmup_steps` updates of linear warm-up."""
        p = self.params
        lr = scheduled(p.learning_rate, p.lr_schedule, at.fraction)
        if p.lr_warmup_steps:
            lr *= min(1.0, (self.updates + 1) / p.lr_warmup_steps)
        return lr

    def learn(self, batch: Arrays, at: Progress = START) -> Learned:
        p = self.params
        lr = self._lr(at)
        for g in self.opt.param_groups:
            g["lr"] = lr
        r = self._prepare(batch)
        sums: dict[str, float] = {}
        count = 0
        params = [t for t in self.trained() if t.requires_grad]
        # dropout stays off: the samplers' log-probs had none (with gradient
        # checkpointing, which runs in training mode alone, build_model zeroed it)
        self.model.train(self.checkpointing)
        stop = False
        for _ in range(p.n_epochs):
            for idx in self._minibatches(r.counted, r.learn.sum(1)):
                got = self._step(r, idx, params)
                for k, v in got.items():
                    sums[k] = sums.get(k, 0.0) + v
                count += 1
                # PPO's early stop (SB3's rule): the update moved too far from the
                # behaviour policy
                if p.target_kl and got.get("losses/approx_kl", 0.0) > 1.5 * p.target_kl:
                    stop = True
                    break
            if stop:
                break
        self.model.train(False)
        self.updates += 1
        out = {k: v / max(count, 1) for k, v in sums.items()}
        out["charts/learning_rate"] = lr
        out["charts/batch_steps"] = float(r.learn.sum())
        out["losses/minibatch_steps"] = float(count)
        if r.ref is not None:
            out["actor/kl_coef"] = self.kl_ctl.value
            self.kl_ctl.update(r.stats.get("charts/kl_ref", 0.0), int(r.counted.sum()))
        out.update(r.stats)
        out.update(self.filter_stats)
        return Learned(out)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "kl_coef": self.kl_ctl.value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.kl_ctl.value = float(state.get("kl_coef", self.kl_ctl.value))


def _no_values() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    raise ValueError("algorithm.params.adv_estimator: a prompt job's critic is a value head, "
                     "\"gae\" (PPO); the others need none (grpo, rloo, reinforce_plus_plus, "
                     "reinforce_plus_plus_baseline)")
