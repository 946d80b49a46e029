"""verl-format prompt files and scoring: GSM8K-style records written by the test
as parquet and JSON lines, read back; chats made prompts; bad rows named by file,
row and column; each epoch deals every prompt once across samplers; the built-in
GSM8K rule (strict and flexible) on hand-checked responses, one without `####`;
a scorer from outside the package returning a dict; mean@N per data source."""

from __future__ import annotations

import json

import numpy as np
import pytest

from verl_zmq.seq.data import (
    DataError,
    chat_prompt,
    epoch_share,
    fit_prompt,
    read_prompts,
)
from verl_zmq.seq.scoring import (
    default_compute_score,
    gsm8k_answer,
    load_compute_score,
    mean_at_n,
    score_response,
)

QUESTIONS = [  # (question, answer): GSM8K's style, worked by hand
    ("Tom has 3 apples and buys 4 more. How many apples does he have?", "7"),
    ("A book costs $12. How much do 3 books cost?", "36"),
    ("Sara had 1,250 stickers and gave away 250. How many are left?", "1000"),
]
SYSTEM = "Let's think step by step and output the final answer after \"####\"."


def _rows():
    return [{"data_source": "openai/gsm8k",
             "prompt": [{"role": "system", "content": SYSTEM},
                        {"role": "user", "content": q}],
             "ability": "math",
             "reward_model": {"style": "rule", "ground_truth": a},
             "extra_info": {"split": "train", "index": i, "question": q}}
            for i, (q, a) in enumerate(QUESTIONS)]


def _write(tmp_path, rows, fmt):
    if fmt == "parquet":
        pa = pytest.importorskip("pyarrow")
        import pyarrow.parquet as pq

        path = tmp_path / "train.parquet"
        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        path = tmp_path / "train.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# hand-checked: (response, strict answer, strict score against row 0..2's answer)
RESPONSES = [
    ("3 + 4 = 7 apples.\n#### 7", "7", 1.0),
    ("Each book is $12, so 3 x 12 = 36.\n#### $36", None, 0.0),  # "$" breaks the format
    ("1,250 - 250 = 1,000\n#### 1,000", "1000", 1.0),
]


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_a_gsm8k_style_file_reads_back_and_scores_as_checked_by_hand(tmp_path, fmt):
    records = read_prompts(_write(tmp_path, _rows(), fmt))
    assert [r.ground_truth for r in records] == ["7", "36", "1000"]
    assert records[1].messages[1] == ("user", QUESTIONS[1][0])
    assert records[2].extra_info["index"] == 2 and records[0].ability == "math"
    prompt = chat_prompt(records[0].messages)
    assert prompt.endswith("<|assistant|>") and QUESTIONS[0][0] in prompt
    for rec, (text, answer, expected) in zip(records, RESPONSES, strict=True):
        assert gsm8k_answer(text) == answer
        assert default_compute_score(rec.data_source, text, rec.ground_truth) == expected


def test_the_gsm8k_rules_on_edge_cases():
    assert gsm8k_answer("the answer is 42") is None  # no ####: strict finds nothing
    assert default_compute_score("openai/gsm8k", "the answer is 42", "42") == 0.0
    assert gsm8k_answer("the answer is 42.", "flexible") == "42."
    assert gsm8k_answer("first 3, then #### 5 and #### -8", "strict") == "-8"  # the last
    assert gsm8k_answer("no digits at all", "flexible") is None
    assert default_compute_score("openai/gsm8k", "#### 7", "8") == 0.0  # wrong answer
    assert default_compute_score("other", " 7 ", "7") == 1.0  # exact match elsewhere
    flexible = load_compute_score("gsm8k_flexible")
    assert flexible("openai/gsm8k", "so it is 36", "36", None) == 1.0


@pytest.mark.parametrize("row, column", [
    ({"prompt": "hi", "reward_model": {"ground_truth": "1"}}, "data_source"),
    ({"data_source": "x", "prompt": [], "reward_model": {"ground_truth": "1"}}, "prompt"),
    ({"data_source": "x", "prompt": [{"role": "robot", "content": "hi"}],
      "reward_model": {"ground_truth": "1"}}, "prompt"),
    ({"data_source": "x", "prompt": "hi", "reward_model": {"style": "rule"}}, "reward_model"),
    ({"data_source": "x", "prompt": "hi", "reward_model": {"ground_truth": "1"},
      "extra_info": [1]}, "extra_info"),
])
def test_a_bad_row_names_the_file_the_row_and_the_column(tmp_path, row, column):
    rows = [*_rows(), row]
    path = _write(tmp_path, rows, "jsonl")
    with pytest.raises(DataError, match=rf"train.jsonl: row 3: column '{column}': expected"):
        read_prompts(path)


def test_unreadable_files_are_named(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"data_source": "x"}\nnot json\n')
    with pytest.raises(DataError, match="bad.jsonl: row 1: not JSON"):
        read_prompts(bad)
    with pytest.raises(DataError, match="expected a .parquet or .jsonl"):
        (tmp_path / "x.csv").write_text("a,b\n")
        read_prompts(tmp_path / "x.csv")
    with pytest.raises(DataError, match="no such file"):
        read_prompts(tmp_path / "missing.parquet")


def test_prompt_truncation_modes():
    ids = list(range(10))
    assert fit_prompt(ids, 4, "left", "f: row 0") == [6, 7, 8, 9]
    assert fit_prompt(ids, 4, "right", "f: row 0") == [0, 1, 2, 3]
    assert fit_prompt(ids, 10, "error", "f: row 0") == ids
    with pytest.raises(DataError, match="f: row 0: the prompt is 10 tokens, over "
                                        "max_prompt_length 4"):
        fit_prompt(ids, 4, "error", "f: row 0")


def test_each_epoch_deals_every_prompt_once_across_samplers():
    for epoch in range(3):
        shares = [epoch_share(10, epoch, w, 3, seed=5) for w in range(3)]
        assert sorted(np.concatenate(shares).tolist()) == list(range(10))
    assert epoch_share(10, 0, 0, 3).tolist() != epoch_share(10, 1, 0, 3).tolist()


SCORER = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    ok = solution_str.strip().endswith(ground_truth)
    return {"score": float(ok), "length": len(solution_str), "note": "text is not a metric"}


def broken(data_source, solution_str, ground_truth, extra_info=None):
    return "yes"
'''


def test_a_lost_samplers_prompts_are_dealt_to_the_others_from_the_next_epoch():
    from verl_zmq.seq.prompts import PromptDeck

    n = 12
    decks = [PromptDeck(n, w, 3, seed=7) for w in range(3)]
    first = [d.draw(4) for d in decks]  # epoch 0: a third each
    assert sorted(sum(first, [])) == list(range(n))
    for i, d in enumerate(decks[:2]):  # sampler 2 is gone for good
        d.regroup(i, 2)
    second = [d.draw(6) for d in decks[:2]]  # epoch 1: halves, every prompt served
    assert sorted(sum(second, [])) == list(range(n))


def test_a_scorer_from_outside_the_package_returns_a_dict(tmp_path, monkeypatch):
    (tmp_path / "my_scorer.py").write_text(SCORER)
    monkeypatch.syspath_prepend(str(tmp_path))
    fn = load_compute_score("my_scorer:compute_score")
    s = score_response(fn, "openai/gsm8k", "so 7", "7", {"index": 0})
    assert s.score == 1.0 and s.metrics == {"length": 4.0}
    with pytest.raises(ValueError, match="returned str, expected a number"):
        score_response(load_compute_score("my_scorer:broken"), "x", "a", "b")
    with pytest.raises(ValueError, match="algorithm.reward 'my_scorer:nothing': module "
                                         "'my_scorer' has no 'nothing'"):
        load_compute_score("my_scorer:nothing")


def test_a_reward_given_as_a_file_path_as_verl_names_it(tmp_path, monkeypatch):
    job = tmp_path / "myjob"
    job.mkdir()
    (job / "my_reward.py").write_text(SCORER + "\ndef other(ds, s, gt, extra=None):\n"
                                      "    return 0.5\n")
    monkeypatch.chdir(tmp_path)  # roles read relative paths from the folder they run in
    fn = load_compute_score("myjob/my_reward.py")  # verl's path, its default name
    assert score_response(fn, "openai/gsm8k", "so 7", "7").score == 1.0
    named = load_compute_score("myjob/my_reward.py", name="other")  # verl's name
    assert score_response(named, "x", "a", "b").score == 0.5
    assert load_compute_score("myjob/my_reward.py:other")("x", "a", "b") == 0.5
    with pytest.raises(ValueError, match="defines no function 'nothing'"):
        load_compute_score("myjob/my_reward.py:nothing")
    with pytest.raises(ValueError, match="no such file .* every host"):
        load_compute_score("myjob/missing.py")
    (job / "broken.py").write_text("import not_a_module_anywhere\n")
    with pytest.raises(ValueError, match="broken.py'.*raised ModuleNotFoundError"):
        load_compute_score("myjob/broken.py")


def test_mean_at_n_per_data_source():
    results = [("gsm8k", 0, 1.0), ("gsm8k", 0, 0.0), ("gsm8k", 1, 1.0), ("gsm8k", 1, 1.0),
               ("math", 0, 0.0), ("math", 0, 0.0)]
    assert mean_at_n(results) == {"val-core/gsm8k/acc/mean@2": 0.75,
                                  "val-core/math/acc/mean@2": 0.0}


def test_several_train_files_and_verl_column_keys(tmp_path):
    from verl_zmq.seq.prompts import prompt_settings

    renamed = [{"chat": r["prompt"], "source": r["data_source"],
                "reward_model": r["reward_model"]} for r in _rows()]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in renamed[:2]))
    (tmp_path / "b.jsonl").write_text("".join(json.dumps(r) + "\n" for r in renamed[2:]))
    files = [str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")]
    s = prompt_settings({"train_files": files, "prompt_key": "chat",
                         "reward_fn_key": "source", "val_temperature": 0.6, "val_n": 4})
    records = read_prompts(s.train_files, s.prompt_key, s.reward_fn_key)
    assert [(r.file[-7:], r.row) for r in records] == [("a.jsonl", 0), ("a.jsonl", 1),
                                                       ("b.jsonl", 0)]
    assert records[2].data_source == "openai/gsm8k" and records[2].ground_truth == "1000"
    with pytest.raises(DataError, match=r"a.jsonl: row 0: column 'data_source'"):
        read_prompts(files)  # verl's default column names: not in these files
    with pytest.raises(ValueError, match="train_files: expected a path or a list of paths"):
        prompt_settings({"train_files": [str(tmp_path / "a.jsonl"), 3]})
