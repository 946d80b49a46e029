"""Every key a Hugging Face GRPO job accepts does something or is refused: the
update on one fixed batch changes with each [algorithm.params] key the learner
reads, the keys it does not read are refused by the job check, and micro-batches
and gradient checkpointing give the whole minibatch's update (to 1e-6)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("peft")

import torch  # noqa: E402

from tests.conftest import CONFIGS  # noqa: E402
from verl_zmq.algos.base import Progress  # noqa: E402
from verl_zmq.config import ConfigError, GRPOParams, load_job  # noqa: E402
from verl_zmq.config.checks import HF_CRITIC, HF_ONLY, HF_OWN_ESTIMATOR, HF_UNREAD  # noqa: E402

JOB = CONFIGS / "reverse_hf_grpo.toml"
BASE = ["environment.kwargs.val_files=", "environment.kwargs.max_response_length=12",
        "sampling.fragment_length=12", "sampling.num_envs_per_worker=16",
        "algorithm.params.batch_size=384", "algorithm.params.minibatch_size=192",
        "algorithm.params.learning_rate=1e-2", "algorithm.params.kl_coef=0.0",
        "algorithm.params.n_epochs=1",
        # any untrained model's responses differ in length: a signal in every group
        "environment.kwargs.reward=tests.test_hf_posttrain:length_score"]

# key: (its changed value, the settings it needs to act, shift of the behaviour
# log-probabilities so that ratios leave the clip range, or 0)
READ_BY_THE_UPDATE: dict[str, tuple[object, list[str], float]] = {
    "learning_rate": (3e-2, [], 0),
    "lr_schedule": ("linear", [], 0),
    "lr_warmup_steps": (4, [], 0),
    "minibatch_size": (96, [], 0),
    "n_epochs": (2, [], 0),
    "max_grad_norm": (1e-3, [], 0),
    "ent_coef": (0.5, [], 0),
    "target_kl": (1e-9, ["algorithm.params.n_epochs=2"], 0),
    "gamma": (0.5, ["algorithm.params.adv_estimator=\"reinforce_plus_plus\""], 0),
    "kl_coef": (0.5, [], 0),
    "kl_estimator": ("k1", ["algorithm.params.kl_coef=0.5"], 0),
    "kl_in": ("reward", ["algorithm.params.kl_coef=0.5"], 0),
    "loss_agg": ("seq-mean-token-mean", [], 0),
    "loss_scale_factor": (3.0, ["algorithm.params.loss_agg=\"seq-mean-token-sum-norm\""], 0),
    "clip_low": (0.95, [], 2.0),
    "clip_high": (20.0, [], -2.0),
    "clip_ratio_c": (3.0, [], -2.0),
    "adv_estimator": ("rloo", [], 0),
    "std_normalize": (False, [], 0),
    "overlong_buffer_len": (6, [], 0),
    "overlong_penalty_factor": (5.0, ["algorithm.params.overlong_buffer_len=6"], 0),
    "policy_loss": ("tests.test_hf_keys:doubled_loss", [], 0),
    # stale behaviour log-probabilities: the anchor and the weight both move
    "decoupled_loss": (True, [], 0.5),
    "behav_imp_weight_cap": (1.2, ["algorithm.params.decoupled_loss=true"], -0.5),
}
# read before the update: by the learner's feed, the fragment filter, or the
# controller that moves kl_coef between updates (each checked below)
READ_AROUND_THE_UPDATE = ("batch_size", "filter_groups", "max_fill_batches", "kl_ctrl",
                          "kl_target", "kl_horizon")
# keys whose update must equal the one without them (checked below)
SAME_UPDATE = ("micro_batch_size", "max_tokens_per_forward")


def doubled_loss(new, old, adv, low, high, clip_c):
    """A policy loss of one's own for the key walk: the clipped surrogate, doubled."""
    ratio = torch.exp(new - old)
    return -2.0 * adv * torch.clamp(ratio, 1 - low, 1 + high), ratio


def _toml(v: object) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    return f'"{v}"' if isinstance(v, str) else repr(v)


@pytest.fixture(scope="module")
def fixed(tmp_path_factory):
    """The job's settings and one batch of real responses (two fragments)."""
    from verl_zmq.algos import make_algorithm
    from verl_zmq.batch import job_layout
    from verl_zmq.envs.make import env_spec
    from verl_zmq.seq.generate import GenerateCollector
    from verl_zmq.seq.toy_prompts import toy_rows, write_prompts

    tmp = tmp_path_factory.mktemp("hfkeys")
    write_prompts(tmp / "t.parquet", toy_rows("reverse", 16, seed=1))
    base = [f"environment.kwargs.train_files={tmp / 't.parquet'}", *BASE]
    job = load_job(JOB, base)
    spec = env_spec(job.environment)
    torch.manual_seed(0)
    col = GenerateCollector(job, make_algorithm(job, spec), 0, 1)
    frags = [col.collect()[0] for _ in range(2)]
    return base, spec, job_layout(job, spec).concat(frags)


HALFWAY = Progress(0, 0.5)  # a linear schedule's value is half its start


def _learned(fixed, sets: list[str], shift: float = 0.0, grads: bool = False):
    """A fresh learner (seeded) after one update on the fixed batch, and its params;
    with `grads`, the first optimiser step's gradients instead, the step not taken
    (Adam would magnify float noise of gradients near zero)."""
    from verl_zmq.algos import make_algorithm

    base, spec, batch = fixed
    job = load_job(JOB, [*base, *sets])
    torch.manual_seed(0)
    algo = make_algorithm(job, spec)
    b = dict(batch)
    if shift:
        b["logp"] = np.where(b["valid"], b["logp"] + shift, b["logp"]).astype(np.float32)
    seen: list[dict] = []
    if grads:
        named = [(n, t) for n, t in algo.model.named_parameters() if t.requires_grad]
        algo.opt.step = lambda *a, **k: seen.append(
            {n: t.grad.detach().numpy().copy() for n, t in named if t.grad is not None})
    torch.manual_seed(1)  # the minibatches' shuffle
    algo.learn(b, HALFWAY)
    if grads:
        return algo, seen[0]
    return algo, {k: v.copy() for k, v in algo.policy_arrays().items()}


def _differs(a: dict, b: dict) -> float:
    return max(float(np.abs(a[k] - b[k]).max()) for k in a)


def test_every_accepted_key_is_read_or_refused(fixed):
    names = {f.name for f in dataclasses.fields(GRPOParams)}
    walked = (set(READ_BY_THE_UPDATE) | set(READ_AROUND_THE_UPDATE) | set(SAME_UPDATE)
              | set(HF_UNREAD) | set(HF_OWN_ESTIMATOR) | set(HF_CRITIC))
    assert walked == names, f"keys nobody walks: {names - walked}, gone: {walked - names}"
    base, _, _ = fixed
    # a value head's keys: refused without one, taken with one (tests/test_hf_ppo.py
    # shows what they do)
    for key in HF_CRITIC:
        with pytest.raises(ConfigError, match=f"algorithm.params.{key}: .*a value head"):
            load_job(JOB, [*base, f"algorithm.params.{key}=1"])
        load_job(JOB, [*base, 'algorithm.params.adv_estimator="gae"', f"algorithm.params.{key}=1"])
    for key in (*HF_UNREAD, *HF_OWN_ESTIMATOR):
        value = {"bool": True, "str": "linear", "int": 7}.get(
            type(getattr(GRPOParams(), key)).__name__, 0.37)
        with pytest.raises(ConfigError, match=f"algorithm.params.{key}: the Hugging Face "
                                              f"learner does not read it"):
            load_job(JOB, [*base, f"algorithm.params.{key}={_toml(value)}"])
    cache: dict[tuple[tuple[str, ...], float], dict] = {}
    for key, (value, needs, shift) in READ_BY_THE_UPDATE.items():
        if (tuple(needs), shift) not in cache:
            cache[tuple(needs), shift] = _learned(fixed, needs, shift)[1]
        _, after = _learned(fixed, [*needs, f"algorithm.params.{key}={_toml(value)}"], shift)
        assert _differs(after, cache[tuple(needs), shift]) > 1e-7, f"{key} changed nothing"


def test_the_keys_read_around_the_update(fixed):
    from verl_zmq.config.algorithms import fill_batches
    from verl_zmq.learning.state import FeedConfig

    base, spec, batch = fixed
    for size, frags in ((384, 2), (768, 4)):  # the feed's fragments per update
        job = load_job(JOB, [*base, f"algorithm.params.batch_size={size}"])
        assert FeedConfig(job.algorithm.params.batch_size,
                          fragment_steps=job.fragment_steps).per_batch == frags
    filtered = load_job(JOB, [*base, "algorithm.params.filter_groups=true",
                              "algorithm.params.max_fill_batches=3"])
    assert fill_batches(filtered) == 3
    algo, _ = _learned(fixed, ["algorithm.params.filter_groups=true"])
    assert algo.fragment_filter() is not None
    coefs = {}
    for extra in ([], ["algorithm.params.kl_target=1e-9"], ["algorithm.params.kl_horizon=10.0"]):
        # the sampled logps shifted off the reference's, so the measured KL is
        # clearly above a target of 1e-9 (unshifted it is float noise around 0)
        algo, _ = _learned(fixed, ["algorithm.params.kl_coef=0.5",
                                   "algorithm.params.kl_ctrl=\"adaptive\"", *extra], shift=0.1)
        coefs[tuple(extra)] = algo.kl_ctl.value
    fixed_coef, _ = _learned(fixed, ["algorithm.params.kl_coef=0.5"])
    assert fixed_coef.kl_ctl.value == 0.5 and len(set(coefs.values())) == 3
    assert 0.5 not in coefs.values()


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_micro_batches_and_checkpointing_give_the_whole_minibatch_update(fixed, agg):
    _, whole = _learned(fixed, [f"algorithm.params.loss_agg=\"{agg}\""], grads=True)
    for sets in (["algorithm.params.micro_batch_size=3"],
                 ["algorithm.params.max_tokens_per_forward=60"],
                 ["algorithm.policy.gradient_checkpointing=true"]):
        _, got = _learned(fixed, [f"algorithm.params.loss_agg=\"{agg}\"", *sets], grads=True)
        assert got.keys() == whole.keys() and _differs(got, whole) < 1e-6, sets


def test_hf_only_keys_are_refused_elsewhere(tmp_path):
    for key in HF_ONLY:
        with pytest.raises(ConfigError, match=f"algorithm.params.{key}: read by the Hugging "
                                              f"Face learner alone"):
            load_job(CONFIGS / "reverse_grpo.toml", [f"algorithm.params.{key}=2"])
    with pytest.raises(ConfigError, match="algorithm.policy.gradient_checkpointing: read for "
                                          "a Hugging Face model alone"):
        load_job(CONFIGS / "reverse_grpo.toml", ["algorithm.policy.gradient_checkpointing=true"])
    assert Path(CONFIGS / "reverse_grpo.toml").exists()


def test_sft_trains_on_the_column_it_is_told_and_warns_when_it_cannot_score(tmp_path):
    from verl_zmq.seq.hf_sft import response_texts, run_hf_sft
    from verl_zmq.seq.toy_prompts import toy_rows, write_prompts

    rows = toy_rows("add", 8, seed=2, min_len=1)
    write_prompts(tmp_path / "t.jsonl", rows)
    assert response_texts(str(tmp_path / "t.jsonl"), "extra_info.answer")[0].endswith(
        f"#### {rows[0]['reward_model']['ground_truth']}")
    with pytest.raises(ValueError, match="row 0: no 'extra_info.solution'"):
        response_texts(str(tmp_path / "t.jsonl"), "extra_info.solution")
    job = load_job(JOB, [f"environment.kwargs.train_files={tmp_path / 't.jsonl'}",
                         "environment.kwargs.val_files=", "environment.kwargs.reward=",
                         "environment.kwargs.max_response_length=16",
                         "sampling.fragment_length=16"])
    heard: dict[str, list[str]] = {}
    for key in ("reward_model.ground_truth", "extra_info.answer"):
        run_hf_sft(job, 1, str(tmp_path / key), batch_prompts=4, eval_every=1,
                   response_key=key, warn=heard.setdefault(key, []).append)
    # bare numbers score 0 under GSM8K's strict rule; the worked solutions score 1
    assert len(heard["reward_model.ground_truth"]) == 1 and not heard["extra_info.answer"]
    assert "score 0.00" in heard["reward_model.ground_truth"][0]


def test_the_verl_mapping_table_names_keys_the_job_has():
    import re

    from verl_zmq.config import Evaluation, Experiment, Policy
    from verl_zmq.seq.prompts import PromptSettings

    text = (Path(__file__).parents[1] / "docs" / "guides" / "post-training.md").read_text()
    start = text.index("| verl config key | here | notes |")
    rows = [line for line in text[start:].split("\n\n")[0].splitlines()[2:]]
    known = {"kwargs": {f.name for f in dataclasses.fields(PromptSettings)},
             "params": {f.name for f in dataclasses.fields(GRPOParams)},
             "policy": {f.name for f in dataclasses.fields(Policy)},
             "evaluation": {f.name for f in dataclasses.fields(Evaluation)},
             "experiment": {f.name for f in dataclasses.fields(Experiment)}}
    named = 0
    for row in rows:
        here = row.split(" | ")[1]
        for tok in re.findall(r"`([^`]+)`", here):
            m = re.fullmatch(r"(?:\[([\w.]+)\] )?(?:(kwargs|algorithm\.params)\.)?"
                             r"([a-z_]+)(?: = .*)?", tok)
            if m is None:
                continue  # a value ("all-linear", "module:fn"), not a key
            section, prefix, key = m.groups()
            if section == "environment":
                continue  # [environment] id, a value of the env section
            where = {"algorithm.policy": "policy", "evaluation": "evaluation",
                     "experiment": "experiment",
                     "kwargs": "kwargs", "algorithm.params": "params"}.get(
                section or prefix or "", "")
            pools = [known[where]] if where else list(known.values())
            assert any(key in pool for pool in pools), f"{tok!r} in: {row[:80]}"
            named += 1
    assert named > 30


def test_bf16_weights_travel_as_one_bucket_of_half_the_bytes():
    from verl_zmq.algos import make_algorithm
    from verl_zmq.envs.make import env_spec
    from verl_zmq.seq.hf import BF16_BUCKET
    from verl_zmq.wire.codec import decode, encode
    from verl_zmq.wire.messages import Params

    sets = ["environment.kwargs.train_files=unused.parquet", "algorithm.policy.dtype=\"bfloat16\""]
    job = load_job(JOB, sets)
    spec = env_spec(job.environment)
    torch.manual_seed(0)
    learner = make_algorithm(job, spec)
    assert learner.model.dtype == torch.bfloat16
    wire = learner.wire_arrays()
    assert list(wire) == [BF16_BUCKET] and wire[BF16_BUCKET].dtype == np.uint16
    named = learner.policy_arrays()  # checkpoints keep named float32 arrays
    assert wire[BF16_BUCKET].nbytes * 2 == sum(a.nbytes for a in named.values())
    frames = encode(Params(version=3, arrays=wire))
    got = decode(frames)
    torch.manual_seed(1)
    sampler = make_algorithm(job, spec)  # other weights until it loads the bucket
    sampler.load_policy_arrays(dict(got.arrays))
    for (k, a), b in zip(learner.model.state_dict().items(),
                         sampler.model.state_dict().values(), strict=True):
        assert torch.equal(a, b), k
    with pytest.raises(ValueError, match="this model takes"):
        sampler.load_policy_arrays({BF16_BUCKET: wire[BF16_BUCKET][:-1]})


def test_params_as_large_as_the_own_model_decode_and_no_larger(monkeypatch):
    from verl_zmq.algos import make_algorithm
    from verl_zmq.envs.make import env_spec
    from verl_zmq.seq.hf import wire_bytes
    from verl_zmq.wire import codec
    from verl_zmq.wire.messages import MAX_HEADER_BYTES, Params, WireError

    job = load_job(JOB, ["environment.kwargs.train_files=unused.parquet"])
    spec = env_spec(job.environment)
    wire = make_algorithm(job, spec).wire_arrays()
    frames = codec.encode(Params(version=1, arrays=wire))
    # a limit below this tiny model's size stands in for 256 MiB below a 100M model's
    monkeypatch.setattr(codec, "_limit", 1024)
    with pytest.raises(WireError, match="above the size limit"):
        codec.decode(frames)
    sampler = make_algorithm(job, spec)  # building a copy raises the limit to its size
    assert codec._limit == wire_bytes(sampler.model, sampler.lora) + MAX_HEADER_BYTES
    sampler.load_policy_arrays(dict(codec.decode(frames).arrays))
    big = {"w": np.zeros(codec._limit // 4 + 1, np.float32)}
    with pytest.raises(WireError, match="above the size limit"):
        codec.decode(codec.encode(Params(version=2, arrays=big)))


def test_sft_responses_stay_with_their_prompts_when_long_prompts_are_filtered(tmp_path):
    from verl_zmq.algos import make_algorithm
    from verl_zmq.envs.make import env_spec
    from verl_zmq.seq.hf_sft import _pairs
    from verl_zmq.seq.toy_prompts import toy_rows, write_prompts

    rows = toy_rows("reverse", 12, seed=0, min_len=3, max_len=6)
    write_prompts(tmp_path / "t.jsonl", rows)
    job = load_job(JOB, [f"environment.kwargs.train_files={tmp_path / 't.jsonl'}",
                         "environment.kwargs.val_files=", "environment.kwargs.max_prompt_length=14",
                         "environment.kwargs.filter_overlong_prompts=true"])
    _, _, _, texts, records = _pairs(make_algorithm(job, env_spec(job.environment)),
                                     "extra_info.answer")
    assert 0 < len(records) < 12  # some prompts left out
    assert texts == [rows[r.row]["extra_info"]["answer"] for r in records]


def test_total_epochs_sets_the_budget_from_the_prompts_kept(tmp_path):
    from click.testing import CliRunner

    from verl_zmq.cli import main
    from verl_zmq.envs.families import with_budget
    from verl_zmq.seq.toy_prompts import toy_rows, write_prompts

    write_prompts(tmp_path / "t.jsonl", toy_rows("reverse", 12, seed=0, min_len=3, max_len=6))
    base = [f"environment.kwargs.train_files={tmp_path / 't.jsonl'}",
            "environment.kwargs.val_files="]
    job = load_job(JOB, base)
    assert with_budget(job) is job  # no total_epochs: the budget as written
    s = job.environment.kwargs
    per_prompt = s["group_size"] * s["max_response_length"]
    job = load_job(JOB, [*base, "environment.kwargs.total_epochs=3"])
    assert with_budget(job).training.total_timesteps == 3 * 12 * per_prompt
    # verl counts the prompts its filter keeps
    filtered = load_job(JOB, [*base, "environment.kwargs.total_epochs=3",
                              "environment.kwargs.max_prompt_length=14",
                              "environment.kwargs.filter_overlong_prompts=true"])
    kept = with_budget(filtered).training.total_timesteps // (3 * per_prompt)
    assert 0 < kept < 12
    got = CliRunner().invoke(main, ["check", str(JOB), *sum(
        (["--set", o] for o in [*base, "environment.kwargs.total_epochs=3"]), [])])
    assert got.exit_code == 0, got.output
    assert f"a budget of {3 * 12 * per_prompt:,} env steps from total_epochs" in got.output
    bad = CliRunner().invoke(main, ["check", str(JOB), *sum(
        (["--set", o] for o in [*base, "environment.kwargs.total_epochs=-1"]), [])])
    assert bad.exit_code == 2 and "environment.kwargs.total_epochs" in bad.output


def test_sft_step_size_warms_up_then_follows_its_schedule():
    """verl's SFT optimiser: a linear warmup over warmup_steps_ratio of the steps,
    then a cosine to 0 (or constant)."""
    from verl_zmq.seq.hf_sft import sft_lr_factor

    f = [sft_lr_factor(i, steps=100, warmup=10, kind="cosine") for i in range(100)]
    assert f[0] == pytest.approx(0.1) and f[9] == pytest.approx(1.0) and f[10] == 1.0
    assert all(a >= b for a, b in zip(f[10:], f[11:])) and f[-1] < 0.001
    assert f[55] == pytest.approx(0.5, abs=0.02)
    assert [sft_lr_factor(i, 100, 0, "constant") for i in (0, 50, 99)] == [1.0, 1.0, 1.0]
