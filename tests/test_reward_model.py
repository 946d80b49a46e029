"""A learned reward model: `verl rm-train` trains one from pairs or scored samples
and refuses a file that mixes them; a job names it (`reward = "model:PATH"`) and
its reward-model server scores every sampler's responses in batches, comes back
after a kill -9 mid-run, and the job ends done; a folder that is no reward model
is refused before anything starts, naming the key."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("transformers")

from tests.conftest import CONFIGS, kill_member, kill_tree, read_events, verl_here, wait_for  # noqa: E402
from tools.harness import start  # noqa: E402
from verl_zmq.seq.toy_prompts import toy_rows, write_prompts  # noqa: E402

JOB = CONFIGS / "reverse_hf_grpo.toml"


def _pairs(path, n: int = 48) -> None:
    """Reversal pairs: the right answer chosen, the digits as given rejected."""
    rows = toy_rows("reverse", n, 0, 4, 6)
    with open(path, "w") as f:
        for r in rows:
            truth = r["reward_model"]["ground_truth"]
            f.write(json.dumps({"prompt": r["prompt"], "chosen": truth,
                                "rejected": truth[::-1]}) + "\n")


@pytest.fixture(scope="module")
def rm(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rm")
    _pairs(folder / "pairs.jsonl")
    r = verl_here("rm-train", str(folder / "pairs.jsonl"), "--out", str(folder / "model"),
                  "--steps", "150", "--batch", "16", "--config",
                  '{"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, '
                  '"num_hidden_layers": 1, "num_attention_heads": 2, '
                  '"num_key_value_heads": 1, "max_position_embeddings": 64}')
    assert r.returncode == 0, r.stderr
    return folder / "model", json.loads(r.stdout.strip().splitlines()[-1])


def test_rm_train_learns_pairs_and_the_folder_scores_them(rm):
    from verl_zmq.seq.reward_model import RewardModel
    from verl_zmq.seq.rm_train import read_rm_data

    folder, report = rm
    assert report["kind"] == "pairs" and report["accuracy"] >= 0.9, report
    # the folder as saved scores as the trained model did: its pairs ranked alike
    pairs = read_rm_data(folder.parent / "pairs.jsonl").pairs
    got = RewardModel(str(folder)).score([x for c, a, b in pairs for x in ((c, a), (c, b))])
    assert np.mean(got[0::2] > got[1::2]) == pytest.approx(report["accuracy"], abs=1e-4)


def test_rm_train_refuses_a_file_of_both_kinds_and_a_bad_row(tmp_path):
    both = tmp_path / "both.jsonl"
    both.write_text(json.dumps({"prompt": "a", "chosen": "x", "rejected": "y"}) + "\n"
                    + json.dumps({"prompt": "a", "response": "x", "score": 1}) + "\n")
    r = verl_here("rm-train", str(both), "--out", str(tmp_path / "m"))
    assert r.returncode != 0 and "give one kind" in r.stderr, r.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "a", "response": "x", "score": "high"}) + "\n")
    r = verl_here("rm-train", str(bad), "--out", str(tmp_path / "m"))
    assert r.returncode != 0 and "row 0" in r.stderr and "'score'" in r.stderr, r.stderr


def test_a_folder_that_is_no_reward_model_is_refused_naming_the_key(tmp_path):
    (tmp_path / "lm").mkdir()
    (tmp_path / "lm" / "config.json").write_text(json.dumps(
        {"architectures": ["LlamaForCausalLM"]}))
    for key, value in (("reward", f"model:{tmp_path / 'lm'}"),
                       ("reward_model", str(tmp_path / "none"))):
        r = verl_here("check", str(JOB), "--set", f'environment.kwargs.{key}="{value}"')
        assert r.returncode != 0 and f"environment.kwargs.{key}" in r.stderr, r.stderr


def test_a_job_scored_by_the_reward_model_survives_its_server_killed(rm, tmp_path):
    folder, _ = rm
    train = write_prompts(tmp_path / "train.jsonl", toy_rows("reverse", 64, 1, 4, 6))
    run = tmp_path / "run"
    fragments = 30  # scored one batch each: most come after the kill
    proc = start(JOB, run, [
        f"environment.kwargs.train_files={train}", f"environment.kwargs.val_files={train}",
        f'environment.kwargs.reward="model:{folder}"', "environment.kwargs.reward_timeout_s=2",
        "environment.kwargs.val_prompts=8", "sampling.num_workers=1",
        "sampling.num_envs_per_worker=16", "algorithm.params.batch_size=128",
        "algorithm.params.minibatch_size=128", f"training.total_timesteps={fragments * 128}",
        f"evaluation.interval_steps={fragments * 128}", "evaluation.stop_at_return=1.01"])
    try:
        wait_for(lambda: [e for e in read_events(run / "logs" / "rewardmodel-0.jsonl")
                          if e.get("event") == "first_batch_scored"], 180,
                 what="the reward model scoring")
        pid = kill_member(run, "rewardmodel-0")
        rc = proc.wait(600)
    finally:
        kill_tree(proc)
    assert rc == 0, (run / "logs" / "launcher.jsonl").read_text()[-3000:]
    served = read_events(run / "logs" / "rewardmodel-0.jsonl")
    assert len([e for e in served if e.get("event") == "reward_model_loaded"]) >= 2
    after = [e for e in served if "rewardmodel/scored" in e and e["pid"] != pid]
    assert after and after[-1]["rewardmodel/scored"] > 0
    sampled = [e for e in read_events(run / "logs" / "sampler-0.jsonl")
               if "sampler/reward_model_score" in e]
    assert sampled and np.isfinite(sampled[-1]["sampler/reward_model_score"])
    done = [e for e in read_events(run / "logs" / "launcher.jsonl")
            if e.get("event") == "launcher_finished"]
    assert done and done[-1]["status"] == "done", done
