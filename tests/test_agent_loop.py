"""Multi-turn rollouts with tools on a real (tiny) Hugging Face model: a model
taught one demonstration calls the calculator, reads its answer and copies it;
the tool's tokens are marked, carry no behaviour log-probability, and are never
learned from (no loss, no KL); the learner's log-probabilities of the model's
tokens, over the whole trajectory in one pass, are the sampler's."""

from __future__ import annotations

import copy

import numpy as np
import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402

from tests.conftest import CONFIGS  # noqa: E402
from tests.taught import build, teach  # noqa: E402
from verl_zmq.algos.base import Progress  # noqa: E402
from verl_zmq.batch import OBSERVED, PROMPT  # noqa: E402
from verl_zmq.seq.agent_loop import TurnLimits, agent_generate, segments  # noqa: E402
from verl_zmq.seq.hf import pad_left, response_logprobs  # noqa: E402
from verl_zmq.seq.hf_sft import _tokens  # noqa: E402
from verl_zmq.seq.tools import RESPONSE_CLOSE, RESPONSE_OPEN, load_tools  # noqa: E402
from verl_zmq.seq.toy_prompts import toy_rows, write_prompts  # noqa: E402

R = 128  # the response's budget: call (77 tokens), answer (39) and the copied result


@pytest.fixture(scope="module")
def taught(tmp_path_factory):
    row = toy_rows("calc", 1, seed=3, min_len=4, max_len=4)[0]
    algo = build(tmp_path_factory.mktemp("calc"), row, R, kl=0.5)
    prompt = teach(algo, row)
    return algo, row, prompt


def test_demonstrations_split_into_model_and_tool_tokens():
    text = '<tool_call>{"a":1}</tool_call><tool_response>42</tool_response>42'
    assert segments(text) == [('<tool_call>{"a":1}</tool_call>', False),
                              ("<tool_response>42</tool_response>", True), ("42", False)]
    assert segments("just an answer") == [("just an answer", False)]
    assert segments("<tool_response>open") == [("<tool_response>open", False)]


def test_a_taught_model_calls_the_tool_and_copies_its_answer(taught):
    algo, row, prompt = taught
    p, pm = pad_left([prompt, prompt], algo.pad)
    g = agent_generate(algo.model, algo.tok, p, pm, algo.sampling(greedy=True), algo.eos,
                       algo.pad, load_tools(["calc"]), TurnLimits(2, 0, 48, R))
    truth = row["reward_model"]["ground_truth"]
    texts = algo.decode(g.response, g.mask)
    assert texts[0] == row["extra_info"]["answer"], texts[0]
    assert g.calls == [1, 1] and g.well_formed == [1, 1] and bool(g.ended.all())
    # the tool's tokens, and only they, are marked observed and carry no log-probability
    obs = g.observed[0].bool()
    assert algo.tok.decode(g.response[0][obs].tolist()) == f"{RESPONSE_OPEN}{truth}{RESPONSE_CLOSE}"
    assert (g.logp[0][obs] == 0).all() and (g.logp[0][~obs & g.mask[0].bool()] < 0).any()
    # the learner's one pass over prompt + whole trajectory reads every model token in
    # the context the sampler drew it in
    with torch.no_grad():
        again = response_logprobs(algo.model, p, pm, g.response, g.mask)
    model = g.mask.bool() & ~g.observed.bool()
    assert torch.allclose(again[model], g.logp[model], atol=1e-4)


def test_the_turn_and_answer_limits_hold(taught):
    algo, row, prompt = taught
    p, pm = pad_left([prompt], algo.pad)
    tools = load_tools(["calc"])
    s = algo.sampling(greedy=True)
    one = agent_generate(algo.model, algo.tok, p, pm, s, algo.eos, algo.pad, tools,
                         TurnLimits(1, 0, 48, R))
    assert one.calls == [1] and int(one.observed.sum()) == 0  # no turn left to answer
    short = agent_generate(algo.model, algo.tok, p, pm, s, algo.eos, algo.pad, tools,
                           TurnLimits(2, 0, 20, R))
    answered = algo.tok.decode(short.response[0][short.observed[0].bool()].tolist())
    assert int(short.observed.sum()) == 20 and answered.endswith(RESPONSE_CLOSE)
    capped = agent_generate(algo.model, algo.tok, p, pm, s, algo.eos, algo.pad, tools,
                            TurnLimits(2, 10, 48, R))
    assert int(capped.mask.sum()) == 10 and capped.calls == [0]  # the turn's tokens spent
    # a tokenizer whose pad is its end token (Llama's, Qwen's): a row stopped at a
    # call is padded with end tokens, and the call is still answered
    same = agent_generate(algo.model, algo.tok, p, pm, s, algo.eos, algo.eos, tools,
                          TurnLimits(2, 0, 48, R))
    assert same.calls == [1] and algo.decode(same.response, same.mask) == \
        [row["extra_info"]["answer"]]
    tight = agent_generate(algo.model, algo.tok, p, pm, s, algo.eos, algo.pad, tools,
                           TurnLimits(4, 0, 48, 40))
    assert int(tight.mask.sum()) <= 40


def _fragment(algo, g, prompt, reward):
    """A learner's batch [T, E] of the trajectories `g` of one prompt."""
    E = g.response.shape[0]
    valid = g.mask.numpy().T.astype(bool)
    lengths = g.mask.sum(1).numpy()
    last = np.zeros((R, E), bool)
    last[lengths - 1, np.arange(E)] = True
    rows = np.full((E, 32), -1, np.int64)
    rows[:, 32 - len(prompt):] = prompt
    return {"obs": np.zeros((R, E, 0), np.float32), "action": g.response.numpy().T.copy(),
            "terminated": last, "truncated": np.zeros((R, E), bool), "valid": valid,
            "reward": np.where(last, reward[None], 0).astype(np.float32),
            "logp": g.logp.numpy().T.astype(np.float32).copy(),
            "bootstrap_obs": np.zeros((E, 0), np.float32),
            "bootstrap_logp": np.zeros(E, np.float32), PROMPT: rows,
            OBSERVED: g.observed.numpy().T.astype(bool)}


def test_tool_tokens_never_enter_a_loss_or_a_kl(taught):
    """Two batches that differ only in the behaviour log-probabilities written at the
    tool's tokens: the update, its loss, its KL and its parameters are the same."""
    out = []
    for garbage in (0.0, -30.0):
        algo = copy.deepcopy(taught[0])
        prompt = taught[2]
        p, pm = pad_left([prompt], algo.pad)
        torch.manual_seed(1)
        g = agent_generate(algo.model, algo.tok, p, pm, algo.sampling(), algo.eos, algo.pad,
                           load_tools(["calc"]), TurnLimits(2, 0, 48, R))
        assert g.observed.any(), "the taught model called no tool"
        batch = _fragment(algo, g, prompt, np.arange(g.response.shape[0], dtype=np.float32))
        batch["logp"] = np.where(batch[OBSERVED], garbage, batch["logp"]).astype(np.float32)
        torch.manual_seed(2)
        stats = algo.learn(batch, Progress(fraction=0.1)).metrics
        out.append((stats, [t.detach().clone() for t in algo.model.parameters()]))
    (a, pa), (b, pb) = out
    for k in ("losses/policy_loss", "charts/kl_ref", "losses/kl_ref", "charts/batch_steps"):
        assert a[k] == pytest.approx(b[k], abs=1e-6), k
    assert all(torch.equal(x, y) for x, y in zip(pa, pb, strict=True))
    model_tokens = (batch["valid"] & ~batch[OBSERVED]).sum()
    assert a["charts/batch_steps"] == model_tokens


def test_a_job_with_tools_runs_end_to_end(taught, tmp_path):
    """The taught model through real samplers, the learner and the evaluator with the
    calculator: calls made and answered in the samplers' rollouts, updates on them,
    and the evaluator's multi-turn validation scoring the copied result."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tools.harness import events, launch

    algo, row, _ = taught
    algo.save_pretrained(tmp_path / "model")
    data = write_prompts(tmp_path / "one.jsonl", [row])
    run = tmp_path / "run"
    rc, _ = launch(CONFIGS / "calc_hf_grpo.toml", run, [
        f"environment.kwargs.train_files={data}", f"environment.kwargs.val_files={data}",
        f"environment.kwargs.max_response_length={R}", f"sampling.fragment_length={R}",
        "environment.kwargs.group_size=4", "environment.kwargs.val_prompts=1",
        "sampling.num_workers=1", "sampling.num_envs_per_worker=8",
        f"algorithm.policy.path={tmp_path / 'model'}", "algorithm.policy.tokenizer=",
        f"algorithm.params.batch_size={8 * R}", f"algorithm.params.minibatch_size={8 * R}",
        f"training.total_timesteps={2 * 8 * R}", f"evaluation.interval_steps={8 * R}",
        "evaluation.stop_at_return=1.01"], timeout=300)
    assert rc == 0, (run / "logs" / "launcher.jsonl").read_text()[-3000:]
    sampled = [e for e in events(run / "logs" / "sampler-0.jsonl") if "sampler/tool_calls" in e]
    assert sampled[-1]["sampler/tool_calls"] >= 8
    assert sampled[-1]["sampler/tool_calls_well_formed"] >= 8
    learned = [e for e in events(run / "logs" / "learner-0.jsonl") if "learner/updates" in e]
    assert learned[-1]["learner/updates"] >= 2
    evals = [e for e in events(run / "logs" / "evaluator-0.jsonl")
             if e.get("event") == "evaluated"]
    assert evals and evals[-1]["eval/return_mean"] == 1.0, evals[-1:]


def test_a_template_that_shows_tools_is_given_their_schemas(tmp_path):
    from verl_zmq.seq.hf import CHAT_TEMPLATE, char_tokenizer
    from verl_zmq.seq.prompts import prompt_lengths, prompt_settings

    tok = char_tokenizer()
    tok.chat_template = ("{% if tools %}<|system|>{% for t in tools %}{{ t.function.name }}"
                         "{% endfor %}<|end|>{% endif %}" + CHAT_TEMPLATE)
    data = write_prompts(tmp_path / "one.jsonl", toy_rows("calc", 1, seed=0))
    shown = prompt_lengths(str(data), tok, prompt_settings(
        {"train_files": str(data), "tools": ["calc"]}))[1][0]
    plain = prompt_lengths(str(data), tok, prompt_settings({"train_files": str(data)}))[1][0]
    assert tok.decode(shown).startswith("<|system|>calc<|end|><|user|>What is")
    assert tok.decode(plain).startswith("<|user|>What is")


def test_sft_learns_the_model_parts_of_a_demonstration_only():
    from verl_zmq.seq.hf import char_tokenizer

    tok = char_tokenizer()
    text = toy_rows("calc", 1, seed=5)[0]["extra_info"]["answer"]
    ids, keep = _tokens(tok, text, tools=True)
    assert tok.decode(ids) == text
    learned = tok.decode([t for t, k in zip(ids, keep, strict=True) if k])
    skipped = tok.decode([t for t, k in zip(ids, keep, strict=True) if not k])
    assert skipped.startswith(RESPONSE_OPEN) and skipped.endswith(RESPONSE_CLOSE)
    assert learned == text.replace(skipped, "")
    assert _tokens(tok, text, tools=False)[1] == [1] * len(ids)  # no tools: all learned
