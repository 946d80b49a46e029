"""The tool server role, in a real job: a model taught to call a hostile tool five
times (a call that loops forever, allocates 10 GB, forks without end, writes
outside its folder, opens a socket) gets each call stopped by the sandbox and
answered as an error it reads; the tool server and the sampler carry on; the
server killed -9 mid-run comes back and answers again; and the job ends done."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("transformers")

from tests.conftest import CONFIGS, kill_member, kill_tree, read_events, wait_for  # noqa: E402
from tests.taught import build, teach  # noqa: E402
from tools.harness import start  # noqa: E402
from verl_zmq.sandbox import confined  # noqa: E402
from verl_zmq.seq.tools import CALL_CLOSE, CALL_OPEN, Call, answer, load_tools  # noqa: E402

KINDS = ("loop", "memory", "fork", "write", "socket")
TIMEOUT_S = 2.0  # environment.kwargs.tool_timeout_s: the loop's call ends here
R = 768  # five calls (about 52 tokens each) and their answers (up to 128 each)
TOOL = "tests.tool_examples:Hostile"


def _demonstration() -> dict:
    """The row whose answer calls the hostile tool once per kind, each answer as
    the sandbox gives it (the model reads exactly these), then says it is done."""
    from verl_zmq.seq.prompts import PromptSettings

    limits = PromptSettings(train_files=["-"], tool_timeout_s=TIMEOUT_S).tool_limits
    tools = load_tools([TOOL], limits=limits)
    parts = []
    for kind in KINDS:
        call = Call("hostile", {"do": kind})
        parts.append(f'{CALL_OPEN}{{"name":"hostile","arguments":{{"do":"{kind}"}}}}{CALL_CLOSE}')
        parts.append(answer(call, tools, {}))
    return {"data_source": "toy/calc", "prompt": [{"role": "user", "content": "Try it."}],
            "ability": "tools", "reward_model": {"style": "rule", "ground_truth": "done"},
            "extra_info": {"answer": "".join(parts) + "done"}}


def _events(run, member: str, event: str) -> list[dict]:
    return [e for e in read_events(run / "logs" / f"{member}.jsonl") if e.get("event") == event]


def test_every_escape_is_an_error_the_model_reads_and_a_killed_server_comes_back(tmp_path):
    row = _demonstration()
    assert all(x in row["extra_info"]["answer"] for x in ("error: timed out", "memory"))
    algo = build(tmp_path, row, R, f"environment.kwargs.tools=[\"{TOOL}\"]",
                 "environment.kwargs.max_assistant_turns=6",
                 "environment.kwargs.max_tool_response_length=128", hidden=64)
    teach(algo, row, steps=200)
    algo.save_pretrained(tmp_path / "model")
    data = (tmp_path / "one.jsonl").resolve()
    run = tmp_path / "run"
    fragments = 6  # each at least TIMEOUT_S long (its loop calls): the kill comes first
    proc = start(CONFIGS / "calc_hf_grpo.toml", run, [
        f"environment.kwargs.train_files={data}", f"environment.kwargs.val_files={data}",
        f'environment.kwargs.tools=["{TOOL}"]', f"environment.kwargs.tool_timeout_s={TIMEOUT_S}",
        "environment.kwargs.max_assistant_turns=6",
        "environment.kwargs.max_tool_response_length=128",
        f"environment.kwargs.max_response_length={R}", f"sampling.fragment_length={R}",
        "environment.kwargs.group_size=2", "environment.kwargs.val_prompts=1",
        "sampling.num_workers=1", "sampling.num_envs_per_worker=2",
        f"algorithm.policy.path={tmp_path / 'model'}", "algorithm.policy.tokenizer=",
        f"algorithm.params.batch_size={2 * R}", f"algorithm.params.minibatch_size={2 * R}",
        f"training.total_timesteps={fragments * 2 * R}",
        f"evaluation.interval_steps={fragments * 2 * R}", "evaluation.stop_at_return=1.01"])
    try:
        # the first trajectories' five calls, each stopped, each answered with its error
        failed = wait_for(lambda: (f := _events(run, "toolserver-0", "tool_call_failed"))
                          and len({e["arguments"] for e in f}) >= len(KINDS) and f, 300,
                          what="a failed call of each kind at the tool server")
        said = {e["arguments"]: e["error"] for e in failed}
        assert "timed out" in said['{"do": "loop"}'], said
        assert "memory" in said['{"do": "memory"}'], said
        for kind in ("fork", "write", "socket") if confined() else ("fork",):
            assert said[f'{{"do": "{kind}"}}'].startswith("error"), said
        assert not os.path.exists("/tmp/verl-tool-escaped") or not confined()
        pid = kill_member(run, "toolserver-0")
        rc = proc.wait(600)
    finally:
        kill_tree(proc)
    assert rc == 0, (run / "logs" / "launcher.jsonl").read_text()[-3000:]
    lives = _events(run, "toolserver-0", "role_started")
    assert len(lives) >= 2  # restarted by the launcher
    answered_after = [e for e in read_events(run / "logs" / "toolserver-0.jsonl")
                      if "toolserver/calls" in e and e["pid"] != pid]
    assert answered_after and answered_after[-1]["toolserver/calls"] > 0
    sampled = [e for e in read_events(run / "logs" / "sampler-0.jsonl")
               if "sampler/tool_calls" in e]
    assert sampled[-1]["sampler/tool_calls_well_formed"] >= 2 * len(KINDS)
    assert len(_events(run, "sampler-0", "role_started")) == 1  # the sampler carried on
