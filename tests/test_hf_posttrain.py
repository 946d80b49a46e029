"""Post-training a Hugging Face causal LM as verl users do (the `llm` extra):
sampler-time and learner-time log-probabilities agree with left padding, bytes
per response grow linearly, a GSM8K-style prompt file goes through generate and
the built-in scorer, LoRA trains adapters against the disabled-adapter
reference, and a whole job from verl-format files (a warm start, then GRPO
through real samplers and the learner) raises validation exact match and leaves
a folder `from_pretrained` loads."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("peft")

import torch  # noqa: E402

from tests.conftest import CONFIGS  # noqa: E402
from verl_zmq.config import load_job  # noqa: E402
from verl_zmq.seq.hf import (  # noqa: E402
    Sampling,
    build_model,
    char_tokenizer,
    generate,
    pad_left,
    response_logprobs,
)

JOB = CONFIGS / "reverse_hf_grpo.toml"
CONFIGS_BY_TYPE = {
    "llama": {"model_type": "llama", "hidden_size": 32, "intermediate_size": 64,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "max_position_embeddings": 128},
    "gpt2": {"model_type": "gpt2", "n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 128},
}


def _policy(model_type: str, **kw):
    return SimpleNamespace(path="", tokenizer="chars", config=CONFIGS_BY_TYPE[model_type],
                           lora_rank=0, lora_alpha=16, target_modules=["q_proj", "v_proj"],
                           **kw)


@pytest.mark.parametrize("model_type", ["llama", "gpt2"])
def test_sampler_and_learner_logprobs_agree_with_left_padding(model_type):
    torch.manual_seed(0)
    tok = char_tokenizer()
    model = build_model(_policy(model_type), tok)
    assert not model.training  # dropout off: two passes over one sequence agree
    rows = [tok(t, add_special_tokens=False).input_ids for t in ("ab", "reverse 12345", "x=1")]
    prompt, mask = pad_left(rows, tok.pad_token_id)
    s = Sampling(n=3, temperature=0.7, top_k=20, max_new_tokens=12)
    g = generate(model, prompt, mask, s, tok.eos_token_id, tok.pad_token_id)
    assert g.response.shape == (9, 12) and g.mask[:, 0].all()
    with torch.no_grad():
        learner = response_logprobs(model, prompt.repeat_interleave(3, 0),
                                    mask.repeat_interleave(3, 0), g.response, g.mask, 0.7)
    m = g.mask.bool()
    assert torch.allclose(g.logp[m], learner[m], atol=1e-5), (g.logp - learner).abs().max()


def test_bytes_per_response_grow_linearly_and_beat_the_per_token_path():
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tools.bench.response_bytes import per_response, per_token

    new = {n: per_response(512, n) for n in (64, 256, 1024)}
    # linear: each extra response token costs the same few bytes
    slope = (new[1024] - new[256]) / 768
    assert slope == pytest.approx((new[256] - new[64]) / 192, rel=0.01) and slope < 32
    assert per_token(512, 1024) / new[1024] >= 50


def test_a_gsm8k_style_file_goes_through_generate_and_the_builtin_scorer(tmp_path):
    from verl_zmq.algos import make_algorithm
    from verl_zmq.batch import job_layout
    from verl_zmq.envs.make import env_spec
    from verl_zmq.seq.generate import GenerateCollector
    from verl_zmq.seq.prompts import PromptDeck
    from verl_zmq.seq.scoring import default_compute_score
    from verl_zmq.seq.toy_prompts import toy_rows, write_prompts

    rows = toy_rows("add", 24, seed=3, min_len=2)
    write_prompts(tmp_path / "train.jsonl", rows)
    # the built-in scorer by data source (gsm8k: the strict `#### N` rule), by hand
    truth = rows[0]["reward_model"]["ground_truth"]
    assert default_compute_score("gsm8k", f"so it is {truth}\n#### {truth}", truth) == 1.0
    assert default_compute_score("gsm8k", f"#### {int(truth) + 1}", truth) == 0.0
    assert default_compute_score("gsm8k", f"the answer is {truth}", truth) == 0.0  # no ####
    assert default_compute_score("gsm8k", "#### 1,234", "1234") == 1.0
    job = load_job(JOB, [f"environment.kwargs.train_files={tmp_path / 'train.jsonl'}",
                         "environment.kwargs.val_files=", "environment.kwargs.reward=",
                         "sampling.num_envs_per_worker=16", "environment.kwargs.group_size=4"])
    spec = env_spec(job.environment)
    torch.manual_seed(0)
    algo = make_algorithm(job, spec)
    col = GenerateCollector(job, algo, 0, 2)
    frag, version = col.collect()
    layout = job_layout(job, spec)
    assert layout.problem(frag) == "" and version == 0
    R, E = layout.T, 16
    assert frag["action"].shape == (R, E) and frag["prompt"].shape == (E, 32)
    # four prompts, four responses each: the same prompt row within a group
    assert (frag["prompt"][0:4] == frag["prompt"][0]).all()
    assert set(np.unique(frag["ep_return"])) <= {0.0, 1.0}
    # each response ends once, where its mask ends, with its score as the reward
    ends = frag["terminated"] | frag["truncated"]
    assert (ends.sum(0) == 1).all()
    last = frag["valid"].sum(0) - 1
    assert (ends[last, np.arange(E)]).all()
    # each epoch, two samplers' decks serve every prompt of the file once
    a, b = PromptDeck(24, 0, 2, seed=5), PromptDeck(24, 1, 2, seed=5)
    assert sorted(a.draw(12) + b.draw(12)) == list(range(24))
    assert sorted(a.draw(12) + b.draw(12)) == list(range(24))  # and again, reshuffled


def length_score(data_source, solution_str, ground_truth, extra_info=None):
    """Any untrained model's responses differ in length: a signal in every group."""
    return len(solution_str) / 10


def test_lora_trains_adapters_against_the_model_without_them(tmp_path):
    from transformers import AutoModelForCausalLM

    from verl_zmq.algos import make_algorithm
    from verl_zmq.batch import job_layout
    from verl_zmq.envs.make import env_spec
    from verl_zmq.seq.generate import GenerateCollector
    from verl_zmq.seq.toy_prompts import toy_rows, write_prompts

    write_prompts(tmp_path / "t.parquet", toy_rows("reverse", 16, seed=1))
    job = load_job(JOB, [f"environment.kwargs.train_files={tmp_path / 't.parquet'}",
                         "environment.kwargs.val_files=", "algorithm.policy.lora_rank=4",
                         "environment.kwargs.reward=tests.test_hf_posttrain:length_score",
                         "algorithm.params.kl_coef=0.01", "algorithm.params.learning_rate=1e-2",
                         "sampling.num_envs_per_worker=16"])
    spec = env_spec(job.environment)
    torch.manual_seed(0)
    learner = make_algorithm(job, spec)
    arrays = {k: v.copy() for k, v in learner.policy_arrays().items()}
    assert arrays and all("lora_" in k for k in arrays)  # samplers get the adapters only
    assert learner.ref is None  # the reference is the model with its adapters off
    col = GenerateCollector(job, make_algorithm(job, spec), 0, 1)
    frags = [col.collect()[0] for _ in range(2)]
    metrics = learner.learn(job_layout(job, spec).concat(frags)).metrics
    assert math.isfinite(metrics["charts/kl_ref"]) and "actor/pg_clipfrac" in metrics
    after = learner.policy_arrays()
    assert any(not np.array_equal(arrays[k], after[k]) for k in arrays)
    learner.save_pretrained(tmp_path / "hf")  # merged: a plain model folder
    plain = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(tmp_path / "hf").padding_side == "left"
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        want = learner.model(input_ids=ids).logits
        got = plain(input_ids=ids).logits
    assert torch.allclose(want, got, atol=1e-4)


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_grpo_from_verl_files_raises_exact_match_and_saves_a_loadable_folder(tmp_path):
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tools.bench.hf_grpo import run_once

    r = run_once(seed=2, work=tmp_path, updates=UPDATES)
    print(f"val exact match {r['before']} -> {r['after']}, KL to the reference "
          f"{r['kl_ref']} nats/token after {r['updates']} updates")
    assert r["rc"] == 0 and r["final"], r
    assert r["first_eval_steps"] > 0, r  # evaluation.before_training = false
    assert math.isfinite(r["kl_ref"]) and r["kl_ref"] >= 0
    assert r["after"] >= r["before"] + MARGIN, r
    _folder_answers_as_the_learner(Path(r["run"]), tmp_path)


# below the worst rise of `python tools/bench/hf_grpo.py --seeds 0 1 2 3 4 --updates 90`
# (+0.02 over 0.11-0.69 before, mean +0.15; this test's seed 2: +0.23)
MARGIN = 0.01
UPDATES = 90


def _folder_answers_as_the_learner(run: Path, work: Path) -> None:
    """`from_pretrained(checkpoints/hf)`, plain transformers, answers the val prompts
    greedily as the learner's last checkpoint does."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl_zmq.algos import make_algorithm
    from verl_zmq.checkpoint import load
    from verl_zmq.config import loads_job
    from verl_zmq.envs.make import env_spec
    from verl_zmq.seq.prompts import encode_prompts

    state = load(run / "checkpoints" / "latest.pt")
    job = loads_job(state["job"])
    algo = make_algorithm(job, env_spec(job.environment))
    algo.load_policy_arrays({k: v.numpy() for k, v in state["policy"].items()})
    enc = encode_prompts(str(work / "val.parquet"), algo.tok, algo.settings)
    prompt, mask = pad_left(enc.ids[:32], algo.pad)
    ours = generate(algo.model, prompt, mask, algo.sampling(greedy=True), algo.eos, algo.pad)
    want = algo.decode(ours.response, ours.mask)
    folder = run / "checkpoints" / "hf"
    # `verl export --format hf` writes the same folder from any checkpoint file
    from verl_zmq.ops.export import export

    exported = export(run / "checkpoints" / "latest.pt", "hf", work / "exported")
    assert (exported / "config.json").is_file() and any(exported.glob("*.safetensors"))
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    texts = [tok.apply_chat_template([{"role": "user", "content": r.messages[0][1]}],
                                     tokenize=False, add_generation_prompt=True)
             for r in enc.records[:32]]
    assert tok.padding_side == "left"  # written into the folder: a plain batched call
    batch = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    out = model.generate(**batch, do_sample=False, max_new_tokens=algo.settings.max_response_length,
                         pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    got = tok.batch_decode(out[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)
    assert [g.strip() for g in got] == [w.strip() for w in want]
    again = AutoModelForCausalLM.from_pretrained(exported).state_dict()
    assert all(torch.equal(v, again[k]) for k, v in model.state_dict().items())


def test_a_bad_prompt_job_is_refused_naming_the_key(tmp_path):
    from verl_zmq.ops.checks import check_job
    from verl_zmq.seq.toy_prompts import toy_rows, write_prompts

    write_prompts(tmp_path / "t.jsonl", toy_rows("reverse", 4, seed=0))
    (tmp_path / "bad.jsonl").write_text('{"data_source": "x", "prompt": "hi"}\n')
    ok = [f"environment.kwargs.train_files={tmp_path / 't.jsonl'}", "environment.kwargs.val_files="]
    for sets, words in [
            (["sampling.fragment_length=16"], "max_response_length"),
            (["environment.kwargs.top_p=0"], "top_p"),
            (["environment.kwargs.n=4"], "environment.kwargs.n: unknown"),
            ([f"environment.kwargs.train_files={tmp_path / 'bad.jsonl'}"],
             "row 0: column 'reward_model'"),
            (["environment.kwargs.reward=no_such_module:fn"], "environment.kwargs.reward"),
            # rows over max_prompt_length named before anything starts, with the fixes
            (["environment.kwargs.max_prompt_length=12"],
             "4 of 4 prompts are over max_prompt_length 12 (rows 0 (15 tokens)"),
            (["environment.kwargs.max_prompt_length=60"],
             "max_response_length 8 is over the model's 64 positions")]:
        problems = check_job(load_job(JOB, ok + sets), networks=False)
        assert any(words in p for p in problems), (sets, problems)
    assert check_job(load_job(JOB, ok), networks=False) == []
    for fix in ("truncation=\"left\"", "filter_overlong_prompts=true"):
        fixed = load_job(JOB, [*ok, "environment.kwargs.max_prompt_length=14",
                               f"environment.kwargs.{fix}"])
        assert check_job(fixed, networks=False) == []
    from verl_zmq.seq.hf import char_tokenizer
    from verl_zmq.seq.prompts import encode_prompts, prompt_settings

    s = prompt_settings(fixed.environment.kwargs)
    enc = encode_prompts(str(tmp_path / "t.jsonl"), char_tokenizer(), s)
    assert 0 < len(enc.records) < 4 and all(len(i) <= 14 for i in enc.ids)  # the long left out


def test_a_raising_or_hanging_scorer_is_counted_and_the_sampler_goes_on():
    import threading

    from verl_zmq.seq.generate import Scorer

    s = Scorer("tests.test_hf_posttrain:moody_score", "zero", timeout_s=0.3)
    got = [s("x", text, "t", {}) for text in ("ok", "raise", "hang", "ok", "nan")]
    assert got == [1.0, None, None, 1.0, None] and s.reward_errors == 3
    # the hung call was left behind in its thread, still sleeping, not waited out
    assert sum(t.name == "scorer" and t.is_alive() for t in threading.enumerate()) >= 2


def moody_score(data_source, solution_str, ground_truth, extra_info=None):
    """Scores 1, raises, hangs or returns a non-number, as the response says."""
    import time

    if solution_str == "raise":
        raise RuntimeError("a broken scorer")
    if solution_str == "hang":
        time.sleep(30)
    if solution_str == "nan":
        return float("nan")
    return 1.0
