"""DAPO with a peer per agent: `verl check` takes a multi-agent DAPO job whose
trained policies share spaces and refuses one whose don't or whose peer count is
not one per policy; the job's members are a peer and a shard per policy; a short
whole job trains every peer on its own agent's steps and the batches the other
peers push (the shipped job's asynchronous gossip), evaluates the joint policy,
and keeps each policy's best; the same job in gradient rounds averages every
minibatch's gradient between the peers."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.conftest import CONFIGS, PY, ROOT, read_events
from verl_zmq.config import ConfigError, load_job
from verl_zmq.config.members import default_specs
from verl_zmq.ops.agent_checks import agent_job_problems

DAPO_SPREAD = CONFIGS / "simple_spread_dapo.toml"


def test_a_peer_per_policy_with_a_shard_each_and_shared_samplers():
    job = load_job(DAPO_SPREAD)
    specs = default_specs(job)
    peers = [(s.member_id, s.group) for s in specs if s.role == "peer"]
    assert peers == [("peer-0", "agent0"), ("peer-1", "agent1"), ("peer-2", "agent2")]
    assert sorted(s.group for s in specs if s.role == "replay") == ["agent0", "agent1", "agent2"]
    # the samplers step every agent of one env: they serve all three peers
    assert {s.group for s in specs if s.role == "sampler"} == {"agent0"}
    assert agent_job_problems(job, networks=True, probe_steps=0) == []


def test_check_refuses_a_peer_count_that_is_not_one_per_policy():
    with pytest.raises(ConfigError, match=r"launch.peers = 2: .* set launch.peers = 3"):
        load_job(DAPO_SPREAD, ["launch.peers=2"])


def test_check_refuses_peers_whose_policies_do_not_share_spaces():
    """simple_tag's predators and prey observe differently: their policies cannot mix."""
    job = load_job(CONFIGS / "simple_tag_ppo.toml",
                   ["algorithm.name=dapo", "launch.peers=2",
                    "multiagent.policies.prey.params={}"])
    problems = agent_job_problems(job, networks=False, probe_steps=0)
    assert any("peers mix their policies" in p and "'prey'" in p for p in problems), problems


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_a_short_job_trains_each_agents_peer_and_gossips_between_them(tmp_path):
    run = tmp_path / "run"
    r = _short_job(run)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    for i in range(3):
        ends = [e for e in read_events(run / "logs" / f"peer-{i}.jsonl")
                if e.get("event") == "metrics"]
        last = ends[-1]
        # its own agent's steps (a third of the group's), trained on with the other
        # agents' batches its neighbours pushed (never counted as its own)
        assert 24000 // 3 - 400 <= last["peer/env_steps"] <= 24000, last
        assert last["gossip/batch_used"] > 0 and last["gossip/batch_refused"] == 0, last
        assert "gossip/grad_rounds" not in last
        assert (run / "checkpoints" / f"peer-{i}" / "latest.pt").exists()
    evs = [e for e in read_events(run / "logs" / "evaluator-0.jsonl")
           if e.get("event") == "evaluated"]
    assert {e["member"] for e in evs} == {"peer-0", "peer-1", "peer-2"}
    assert all("eval/return/agent0" in e for e in evs)
    summary = json.loads((run / "summary.json").read_text())
    assert set(summary["best_checkpoints"]) == {"agent0", "agent1", "agent2"}
    assert "best of agent0" in r.stdout + r.stderr  # the closing block


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_gradient_rounds_average_every_minibatch_between_agents(tmp_path):
    run = tmp_path / "run"
    r = _short_job(run, 'gossip.mixing="gradients"', "gossip.update_interval=5")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    for i in range(3):
        last = [e for e in read_events(run / "logs" / f"peer-{i}.jsonl")
                if e.get("event") == "metrics"][-1]
        # every update in rounds with the other two (a round is one minibatch: 4 a
        # peer's update, 10 epochs)
        assert last["gossip/grad_rounds"] >= 40 * last["peer/updates"] * 0.9, last


def _short_job(run, *sets: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PY, "-m", "launcher", "configs/hosts.local.txt", str(DAPO_SPREAD),
         "--run-dir", str(run), "--set", "training.total_timesteps=24000",
         "--set", "sampling.num_workers=1", "--set", "sampling.num_envs_per_worker=8",
         "--set", "algorithm.params.batch_size=1200",
         "--set", "algorithm.params.minibatch_size=300",
         "--set", "evaluation.interval_steps=12000", "--set", "evaluation.n_eval_episodes=5",
         "--set", "evaluation.confirm_best=false", "--set", "logging.interval_s=0.5",
         "--no-env-check", *[x for o in sets for x in ("--set", o)]],
        cwd=ROOT, capture_output=True, text=True, timeout=280)
