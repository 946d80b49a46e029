"""Multi-agent envs and action masks: PettingZoo's parallel and AEC envs as
decisions, each trained policy's fragments with their agent column, masks
honoured by every actor (none illegal in 100k steps), the shard refusing a
fragment of another policy or with agents not mapped to its own, and short
whole jobs (shared policy, two trained policies, self-play against references)."""

from __future__ import annotations

import json
import subprocess

import gymnasium as gym
import numpy as np
import pytest
import zmq

from tests.conftest import CONFIGS, PY, ROOT, poll, read_events
from verl_zmq import wire
from verl_zmq.batch import AGENT
from verl_zmq.config import ConfigError, Environment, MultiAgent, load_job, loads_job
from verl_zmq.envs.agents import AgentEnv, make_agent_env, policy_spec
from verl_zmq.policy.numpy_actor import make_actor
from verl_zmq.sampling.agents import MultiAgentCollector

SPREAD = "mpe2.simple_spread_v3:parallel_env"
C4 = "pettingzoo.classic.connect_four_v3:env"

if "verl/MaskedChoice-v0" not in gym.registry:
    gym.register("verl/MaskedChoice-v0", entry_point="tests.ma_envs:MaskedChoice")


def _job(env: str, extra: str = "", sampling: str = "num_envs_per_worker = 4") -> object:
    return loads_job(f"""
[experiment]
name = "t"
[environment]
id = "{env}"
[sampling]
{sampling}
fragment_length = 8
[algorithm]
name = "ppo"
[algorithm.params]
batch_size = 64
minibatch_size = 32
[training]
total_timesteps = 1000
[multiagent]
{extra}
""")


def _collector(job, seed=0):
    ma = job.multiagent
    actors = {p: make_actor(job.policy_view(p), policy_spec(job.environment, ma, p), (0, 1),
                            (seed, seed)) for p in ma.trained}

    def snap(p, arrays):
        a = make_actor(job.policy_view(p), policy_spec(job.environment, ma, p), (0, 1), (9, 9))
        a.load_policy_arrays(arrays)
        return a

    return MultiAgentCollector(job, actors, 0, 1, snap), actors


# -- envs and specs ------------------------------------------------------------------------

def test_parallel_and_aec_envs_become_decisions():
    par = AgentEnv(make_agent_env(Environment(id=SPREAD)), 0)
    p = par.reset()
    assert p.started and set(p.act) == {"agent_0", "agent_1", "agent_2"}
    q = par.step({a: 0 for a in p.act})
    assert set(q.rewards) == set(q.act) == set(p.act) and not q.ended
    aec = AgentEnv(make_agent_env(Environment(id=C4)), 0)
    p = aec.reset()
    assert list(p.act) == ["player_0"]  # one agent at a time, in turn
    moves = 0
    while not aec.over:
        (agent, obs), = p.act.items()
        p = aec.step({agent: int(np.flatnonzero(obs["action_mask"])[0])})
        moves += 1
    assert set(p.ended) == {"player_0", "player_1"} and moves >= 7
    assert sorted(p.rewards.values()) == [-1.0, 1.0]  # the game's outcome, both sides


def test_policy_specs_mask_index_state_and_refusals():
    ma = MultiAgent(agent_index=True, centralised_critic=True)
    s = policy_spec(Environment(id=SPREAD), ma, "shared")
    assert [leaf.column for leaf in s.leaves] == ["obs", "obs.agent_index", "obs.state"]
    assert s.critic_only == ("obs.state",) and s.actor_width == 18 + 3
    assert s.agents == (0, 1, 2)
    c4 = policy_spec(Environment(id=C4), MultiAgent(), "shared")
    assert c4.mask == "obs.action_mask" and c4.mask_slice == (0, 7)
    with pytest.raises(ValueError, match="different observation spaces.*policy_mapping"):
        policy_spec(Environment(id="tests.ma_envs:leaving"), MultiAgent(), "shared")
    with pytest.raises(ConfigError, match="policy_mapping.*no such policy"):
        _job(SPREAD, 'policy_mapping = { "agent_*" = "nobody" }')
    with pytest.raises(ConfigError, match="learning_rat.*not ppo's"):
        _job(SPREAD, '[multiagent.policies.shared]\nparams = { learning_rat = 1.0 }')


# -- the collector ----------------------------------------------------------------------------

def test_fragments_fit_their_layout_and_carry_each_agent():
    job = _job(SPREAD, "centralised_critic = true")
    c, _ = _collector(job)
    got = []
    for _ in range(6):
        for p, arrays, _version in c.collect_ready():
            assert not c.layouts[p].problem(arrays), c.layouts[p].problem(arrays)
            got.append(arrays)
    a = got[-1]
    assert a["reward"].shape == (8, 12)  # 4 copies x 3 agents, 8 rows each
    assert set(np.unique(a[AGENT])) == {0, 1, 2}
    assert a["valid"].mean() > 0.8  # invalid: the NEXT_STEP row after each episode
    ended = a["truncated"].any(0)  # an episode of 25 steps ends in 8-row fragments
    assert sum(x["truncated"].sum() for x in got) >= 12 and len(got) == 6
    assert c.team_returns and ended.dtype == bool


def test_agents_that_leave_and_join_keep_their_columns_in_step():
    job = _job("tests.ma_envs:leaving", """
policy_mapping = { "runner" = "solo", "*" = "crowd" }
[multiagent.policies.crowd]
[multiagent.policies.solo]
""")
    c, _ = _collector(job)
    seen: dict[str, list] = {"crowd": [], "solo": []}
    for _ in range(12):
        for p, arrays, _ in c.collect_ready():
            assert not c.layouts[p].problem(arrays)
            seen[p].append(arrays)
    crowd = np.concatenate([a[AGENT] for a in seen["crowd"]])
    assert {0, 1, 3} <= set(np.unique(crowd)) and -1 in crowd  # `late` pads before it joins
    solo = np.concatenate([a["terminated"] for a in seen["solo"]])
    assert solo.any()  # the runner's episode ends at step 3, terminated
    # rewards: 1 for an action equal to the agent's index mod 3; random play earns some
    assert np.concatenate([a["reward"] for a in seen["crowd"]]).sum() > 0


def test_self_play_league_snapshots_opponents_and_keeps_a_record():
    job = _job(C4, "[multiagent.league]\nsnapshot_every = 1\nsize = 2\nlatest = 0.0\n"
               "sampling = \"win_rate\"")
    c, actors = _collector(job)
    arrays = {k: v + 0.01 for k, v in actors["shared"].arrays.items()}
    for version in range(1, 5):  # params arrive: a snapshot each (every update), 2 kept
        c.offer("shared", version, version, {k: v * (1 + version / 100) for k, v in
                                              arrays.items()})
        for _ in range(3):
            for p, frag, _ in c.collect_ready():
                assert not c.layouts[p].problem(frag)
                assert set(np.unique(frag[AGENT])) <= {-1, 0, 1}
    lg = c.leagues["shared"]
    assert [u for u, _ in lg.snaps] == [3, 4] and sum(r[1] for r in lg.record.values()) > 0
    assert c.illegal == 0 and c.seats["shared"].E == 4  # one learning seat per game


def test_a_scripted_reference_given_a_seed_varies_its_games_and_repeats_them():
    from verl_zmq.envs.agents import agents_of
    from verl_zmq.envs.opponents import connect_four_lookahead
    from verl_zmq.sampling.agents_eval import head_to_head, raw_player
    from verl_zmq.sampling.league import ScriptedPolicy

    look = "verl_zmq.envs.opponents:connect_four_lookahead"
    empty = {"observation": np.zeros((6, 7, 2), np.int8), "action_mask": np.ones(7, np.int8)}
    # without a generator a position is always answered alike
    assert len({connect_four_lookahead(empty, "player_0") for _ in range(20)}) == 1
    first = ScriptedPolicy(look, "t", 3).act_raw("player_0", empty)
    p = ScriptedPolicy(look, "t", 3)
    moves = [p.act_raw("player_0", empty) for _ in range(20)]
    assert len(set(moves)) > 2  # its own generator: the same position, other moves
    q = ScriptedPolicy(look, "t", 3)
    assert [q.act_raw("player_0", empty) for _ in range(20)] == moves and moves[0] == first
    cfg = Environment(id=C4)
    agents = agents_of(cfg)
    w, d, lo = head_to_head(cfg, agents, raw_player(look, agents, 1),
                            raw_player("random", agents, 2), 40, 0, True)
    assert w + d + lo == 40 and w > 2 * lo  # it still wins and blocks


# -- masks ------------------------------------------------------------------------------------

def test_no_masked_action_in_100k_steps_by_sampler_evaluator_or_serve(tmp_path):
    """MaskedChoice raises on an illegal action: the samplers' numpy and torch
    policies, DQN's epsilon-greedy, the evaluator and an exported (served) policy
    step it 100k times in all without one."""
    from verl_zmq.checkpoint import policy_state, save_atomic
    from verl_zmq.config import dumps_job
    from verl_zmq.envs.make import env_spec, make_vector_env
    from verl_zmq.ops.export import export
    from verl_zmq.ops.serve import Runner
    from verl_zmq.policy.evaluate import evaluate
    from verl_zmq.sampling.collector import EnvCollector

    def job_of(algo: str, inference: str = "auto") -> object:
        return loads_job(f"""
[experiment]
name = "m"
[environment]
id = "verl/MaskedChoice-v0"
[sampling]
num_envs_per_worker = 64
fragment_length = 64
inference = "{inference}"
[algorithm]
name = "{algo}"
[training]
total_timesteps = 1000
""")

    steps = 0
    for algo, inference, frags in (("ppo", "numpy", 14), ("ppo", "torch", 4),
                                   ("dqn", "numpy", 6)):
        job = job_of(algo, inference)
        spec = env_spec(job.environment)
        assert spec.mask == "obs.action_mask"
        actor = make_actor(job, spec, (0, 1), (0, 0))
        venv, seeds = make_vector_env(job.environment, 64, 0)
        c = EnvCollector(job, actor, venv, seeds)
        for _ in range(frags):
            arrays, _ = c.collect()
            steps += arrays["reward"].size
        c.close()
        rets = evaluate(actor, job, None, 50, 0, deterministic=True)
        steps += 50 * 20
        assert rets.shape == (50,)
        evaluate(actor, job, None, 50, 1, deterministic=False)
        steps += 50 * 20
    job = job_of("ppo")
    spec = env_spec(job.environment)
    actor = make_actor(job, spec, (0, 1), (0, 0))
    path = tmp_path / "masked.pt"
    save_atomic(policy_state(dumps_job(job), "ppo", actor.arrays, None, env_steps=1), path)
    export(path, "onnx", tmp_path / "p.onnx")
    runner = Runner(tmp_path / "p.onnx")
    env = gym.make("verl/MaskedChoice-v0")
    obs, _ = env.reset(seed=0)
    while steps < 100_000:
        xs = [obs[c.split(".", 1)[1]][None].astype(np.float32 if c.split(".")[1] == "obs"
                                                     else np.int8) for c in runner.inputs]
        a = int(np.asarray(runner(xs)[0]).reshape(-1)[0])
        obs, _, te, tr, _ = env.step(a)  # raises on an illegal action
        steps += 1
        if te or tr:
            obs, _ = env.reset()
    assert steps >= 100_000


def test_dqn_targets_and_exploration_keep_to_legal_actions():
    import torch

    from verl_zmq.algos.dqn import double_dqn_target
    from verl_zmq.algos.exploration import epsilon_greedy

    q = np.array([[5.0, 1.0, 0.0], [0.0, 9.0, 1.0]], np.float32)
    legal = np.array([[False, True, True], [True, False, False]])
    rng = np.random.default_rng(0)
    for _ in range(200):
        a, ex = epsilon_greedy(q, 0.5, rng, legal)
        assert legal[np.arange(2), a].all()
    a, ex = epsilon_greedy(q, 0.0, None, legal)
    assert a.tolist() == [1, 0] and ex["q_max"].tolist() == [1.0, 0.0]
    t = double_dqn_target(torch.tensor(q), torch.tensor(q), torch.zeros(2), torch.ones(2),
                          torch.tensor(legal))
    assert t.tolist() == [1.0, 0.0]


# -- the shard ------------------------------------------------------------------------------

def test_layout_refuses_agents_not_mapped_to_the_policy():
    job = _job("tests.ma_envs:leaving", """
policy_mapping = { "runner" = "solo", "*" = "crowd" }
[multiagent.policies.crowd]
[multiagent.policies.solo]
""")
    c, _ = _collector(job)
    p, arrays, _ = next(iter(c.collect_ready()))
    lay = c.layouts[p]
    bad = dict(arrays)
    bad[AGENT] = np.where(arrays[AGENT] >= 0, 2 if p == "crowd" else 0, -1)
    assert "not mapped to this policy" in lay.problem(bad)
    bad[AGENT] = arrays[AGENT].astype(np.float32)
    assert "not integers" in lay.problem(bad)
    bad[AGENT] = np.where(arrays["valid"], -1, arrays[AGENT])
    assert "valid steps with no agent" in lay.problem(bad)
    assert not lay.problem(arrays)


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_a_live_shard_drops_another_policys_fragment_and_foreign_agents(tmp_path):
    """Two trained policies (a shard each): fragments sent to the predators' shard
    with the prey's name, or with an agent that is not a predator, are counted and
    dropped; the job ends as it would have."""
    from tests.conftest import free_port_range

    job = load_job(CONFIGS / "simple_tag_ppo.toml")
    run = tmp_path / "run"
    lo, hi = free_port_range()
    proc = subprocess.Popen(
        [PY, "-m", "launcher", "configs/hosts.local.txt", str(CONFIGS / "simple_tag_ppo.toml"),
         "--run-dir", str(run), "--set", f"launch.port_range=[{lo}, {hi}]",
         "--set", "training.total_timesteps=30000",
         "--set", "multiagent.policies.prey.total_timesteps=10000",
         "--set", "sampling.num_workers=1", "--set", "sampling.num_envs_per_worker=4",
         "--set", "evaluation.interval_steps=1000000", "--set", "evaluation.n_eval_episodes=2",
         "--set", "logging.interval_s=0.5", "--set", "security.curve=false",
         "--no-env-check"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def shard_endpoint():
        for e in read_events(run / "logs" / "replay-0.jsonl"):
            if e.get("event") == "role_started" and e.get("endpoints"):
                return e["endpoints"]["fragments"]
        return None

    try:
        ep = poll(shard_endpoint, 120)
        assert ep, "the predators' shard did not start"
        small = job.__class__(**{**job.__dict__,
                                 "sampling": job.sampling.__class__(
                                     **{**job.sampling.__dict__, "num_envs_per_worker": 4})})
        c, _ = _collector(small)
        frag = next(a for p, a, _ in c.collect_ready() if p == "predator")
        wrong_agent = dict(frag)
        wrong_agent[AGENT] = np.where(frag[AGENT] >= 0, 3, -1)  # agent_0: the prey
        ctx = zmq.Context()
        push = ctx.socket(zmq.PUSH)
        push.connect(ep)
        for msg in (wire.Fragment(version=0, arrays=frag, policy="prey"),
                    wire.Fragment(version=0, arrays=wrong_agent, policy="predator")):
            push.send_multipart(wire.encode(msg))
        push.close(linger=5000)
        ctx.term()

        def rejected():
            ms = [e for e in read_events(run / "logs" / "replay-0.jsonl")
                  if e.get("event") == "metrics"]
            return ms and ms[-1].get("replay/rejected", 0) >= 2

        assert poll(rejected, 60), "the shard did not count both fragments"
        out, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out[-3000:]
    logs = (run / "logs" / "replay-0.jsonl").read_text()
    # the first reject is logged (a sender's later ones are counted, not each logged)
    assert "policy 'prey', this shard holds 'predator'" in logs
    assert (run / "checkpoints" / "predator" / "latest.pt").exists()
    assert (run / "checkpoints" / "prey" / "latest.pt").exists()


# -- whole jobs ------------------------------------------------------------------------------

@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_self_play_job_plays_references_and_rates_itself(tmp_path):
    run = tmp_path / "run"
    r = subprocess.run(
        [PY, "-m", "launcher", "configs/hosts.local.txt",
         str(CONFIGS / "connect_four_selfplay.toml"), "--run-dir", str(run),
         "--set", "training.total_timesteps=12000", "--set", "sampling.num_workers=1",
         "--set", "sampling.num_envs_per_worker=8", "--set", "algorithm.params.batch_size=512",
         "--set", "multiagent.games=10", "--set", "evaluation.interval_steps=6000",
         "--set", "multiagent.league.snapshot_every=1"],
        cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    evs = [e for e in read_events(run / "logs" / "evaluator-0.jsonl")
           if e.get("event") == "evaluated"]
    assert evs and all(e["eval/illegal_moves"] == 0 for e in evs)
    last = evs[-1]
    assert {"eval/vs/random/win", "eval/rating", "score"} <= set(last)
    assert last["score"] == last["eval/rating"]
    assert (run / "checkpoints" / "best.pt").exists()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["evaluations"]
