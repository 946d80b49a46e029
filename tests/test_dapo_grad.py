"""Decentralised DAPO's gradient rounds (`gossip.mixing = "gradients"`, opt-in:
the group's batch shared by 4 peers, every minibatch's gradient averaged over
them, each round waiting for the others), end to end on CartPole: peer-3 is
killed with -9 in the middle of the rounds and restarted by the launcher. The
others' rounds wait for it at most one deadline each, never forever, and leave
only it out; every evaluation is finite; rounds before the kill gave the peers
identical parameters (the evaluator saw one fingerprint for several peers);
every peer reaches the target (300), and evaluations after the kill include the restarted
peer."""

from __future__ import annotations

import math
import os
import signal
import time

import pytest

from tests.conftest import CONFIGS, kill_tree, read_events, start_job, wait_for

pytestmark = pytest.mark.e2e  # real processes

TARGET = 300.0  # every peer there: the machinery shown, at less than the task's 475
DEADLINE_S = 3.0  # gossip.round_deadline_s = 0: heartbeat_interval_s x heartbeat_liveness
SLACK_S = 2.0
# the shipped job in gradient rounds: its asynchronous keys back at their defaults
ROUNDS = ('gossip.mixing="gradients"', "gossip.update_interval=5", "gossip.sync_interval=10")


def _ev(path, name):
    return [e for e in read_events(path) if e.get("event") == name]


def _shared(evs: list[dict]) -> bool:
    """Some set of parameters evaluated after version 0 was credited to two peers."""
    members: dict[str, set[str]] = {}
    for e in evs:
        if e["params_version"] > 0:
            members.setdefault(e["params"], set()).add(e["member"])
    return any(len(m) > 1 for m in members.values())


def _evaluated(logs) -> list[dict]:
    """The evaluator's evaluations. A peer an update past the params that every peer
    held is credited with those, and the event says when it held them
    (`params_version`): its own `version` is its newest."""
    return _ev(logs / "evaluator-0.jsonl", "evaluated")


@pytest.fixture(scope="module")
def grad_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("dapo_grad") / "run"
    proc = start_job(CONFIGS / "cartpole_dapo.toml", run, *ROUNDS,
                     f"evaluation.stop_at_return={TARGET}")
    logs = run / "logs"
    info: dict = {}
    try:
        wait_for(lambda: all(len(_ev(logs / f"peer-{i}.jsonl", "gossip_round_mixed")) >= 1
                             for i in range(4)), 300, what="a parameter round on every peer")
        # the kill waits for the evaluator to have seen one set of parameters on two
        # peers: under load its subscriptions to the other peers may come up only
        # after it has evaluated peer-0 alone a few times
        wait_for(lambda: _shared(_evaluated(logs)), 300,
                 what="one evaluated set of parameters held by two peers")
        pid = [e["pid"] for e in _ev(logs / "launcher.jsonl", "role_started")
               if e.get("member") == "peer-3"][-1]
        os.kill(pid, signal.SIGKILL)  # updates are rounds: it dies inside one
        info["killed_at"] = time.time()
        out, errtext = proc.communicate(timeout=600)
    finally:
        kill_tree(proc)
    return {"run": run, "rc": proc.returncode, "stderr": errtext, **info}


@pytest.mark.timeout(900)
def test_the_job_ends_with_every_peer_at_the_target(grad_run):
    assert grad_run["rc"] == 0, grad_run["stderr"][-3000:]
    evs = _ev(grad_run["run"] / "logs" / "evaluator-0.jsonl", "evaluated")
    assert all(math.isfinite(e["eval/return_mean"]) for e in evs)
    best: dict[str, float] = {}
    for e in evs:
        best[e["member"]] = max(best.get(e["member"], -math.inf), e["eval/return_mean"])
    assert set(best) == {f"peer-{i}" for i in range(4)} and min(best.values()) >= TARGET, best
    after = [e for e in evs if e["ts"] > grad_run["killed_at"]]
    if after:  # the job went on after the kill: the restarted peer-3 was evaluated too
        assert any(e["member"] == "peer-3" for e in after), after


@pytest.mark.timeout(900)
def test_a_killed_peer_stalls_the_rounds_at_most_a_deadline_at_a_time(grad_run):
    logs = grad_run["run"] / "logs"
    for i in range(3):
        evs = read_events(logs / f"peer-{i}.jsonl")
        stop = min([e["ts"] for e in evs if e.get("event") == "stop_requested"] or [math.inf])
        partial = [e for e in evs if e.get("event") == "gradient_round_partial"
                   and grad_run["killed_at"] < e["ts"] < stop]  # the job's end stops rounds too
        for e in partial:
            assert e["missing"] == ["peer-3"] and e["wait_s"] <= DEADLINE_S + SLACK_S, e
        # it is marked behind after one: not one deadline per round until it is back
        assert sum(e["wait_s"] for e in partial) <= 3 * (DEADLINE_S + SLACK_S), partial
        metrics = [e for e in evs if e.get("event") == "metrics"]
        assert metrics[-1]["gossip/grad_rounds"] > 100  # rounds went on


@pytest.mark.timeout(900)
def test_gradient_rounds_keep_the_peers_parameters_identical(grad_run):
    logs = grad_run["run"] / "logs"
    # a round without every peer (one missed its deadline, a round could not run, or a
    # peer did not know all the others yet) leaves the parameters apart until the next
    # parameter round: said in the logs, and then nothing to compare
    alone = [e for i in range(4) for name in ("gradient_round_partial",
                                              "gradient_round_abandoned",
                                              "gradient_round_short")
             for e in _ev(logs / f"peer-{i}.jsonl", name) if e["ts"] < grad_run["killed_at"]]
    if alone:
        pytest.skip("a round before the kill went without a peer (a loaded machine)")
    evs = [e for e in _evaluated(logs) if e["ts"] < grad_run["killed_at"]]
    assert _shared(evs), evs
    # and one version is one set of parameters, whoever holds it (a peer credited
    # with params it held an update ago says so: params_version)
    by_version: dict[int, set[str]] = {}
    for e in evs:
        by_version.setdefault(e["params_version"], set()).add(e["params"])
    assert all(len(p) == 1 for p in by_version.values()), by_version
