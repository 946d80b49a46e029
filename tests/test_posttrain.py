"""Post-training pieces with hand-computed values: sequence envs and their
lock-step groups, group-normalised advantages, loss aggregation, the KL
estimators, the causal transformer and the reward function's failures."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
import torch

from tests.conftest import CONFIGS, kill_tree, read_events, start_job
from verl_zmq.algos.grpo import group_advantages, seq_mean_token_sum
from verl_zmq.algos.reference import kl_estimate
from verl_zmq.batch import episodes
from verl_zmq.config import load_job
from verl_zmq.seq.env import SeqEnv, SeqVectorEnv
from verl_zmq.seq.tasks import DIGIT0, EOS, FIRST_ACTION_TOKEN, SEP, Reverse

JOB = "configs/reverse_grpo.toml"


def act(token: int) -> int:
    return token - FIRST_ACTION_TOKEN


def raising_reward(prompt, response, meta):
    raise RuntimeError("a broken reward function")


def nan_reward(prompt, response, meta):
    return float("nan")


def test_group_advantages_by_hand():
    # two groups of 3 (columns 0-2, 3-5), one response each; group 2 all equal
    scores = np.array([[1.0], [0.0], [0.5], [0.7], [0.7], [0.7]])
    counted = np.ones_like(scores, bool)
    adv, signal = group_advantages(scores, counted, 3)
    std = math.sqrt(((0.5 ** 2) * 2) / 2)  # mean 0.5, unbiased std 0.5
    assert adv[:3, 0] == pytest.approx([0.5 / std, -0.5 / std, 0.0], abs=1e-5)
    assert adv[3:, 0] == pytest.approx([0.0, 0.0, 0.0])  # no signal: all equal
    assert signal.tolist() == [[True], [False]]
    adv, _ = group_advantages(scores, counted, 3, std_normalize=False)  # Dr. GRPO
    assert adv[:3, 0] == pytest.approx([0.5, -0.5, 0.0], abs=1e-6)
    # a dropped response takes no part: the group is the other two
    counted[1, 0] = False
    adv, _ = group_advantages(scores, counted, 3, std_normalize=False)
    assert adv[:3, 0] == pytest.approx([0.25, 0.0, -0.25], abs=1e-6)


def test_episodes_split_columns_at_their_ends():
    term = np.array([[0, 0], [1, 0], [0, 1], [0, 0], [1, 0]], bool)
    trunc = np.array([[0, 0], [0, 0], [0, 0], [0, 1], [0, 0]], bool)
    valid = np.array([[1, 1], [1, 1], [0, 1], [1, 0], [1, 1]], bool)
    ordinal, how = episodes(term, trunc, valid)
    assert ordinal[:, 0].tolist() == [0, 0, 1, 1, 1]
    assert ordinal[:, 1].tolist() == [0, 0, 0, 1, 1]
    # column 0: ended terminated twice; column 1: terminated, then an end that was not
    # valid (never counted), then a last episode still running
    assert how[0].tolist() == [1, 1]
    assert how[1].tolist() == [1, 0]


def test_token_mean_and_seq_mean_token_sum():
    per_step = torch.tensor([1.0, 2.0, 3.0, 10.0])
    seq = torch.tensor([0, 0, 0, 1])
    assert float(per_step.mean()) == pytest.approx(4.0)
    assert float(seq_mean_token_sum(per_step, {"seq": seq})) == pytest.approx((6.0 + 10.0) / 2)


def test_kl_estimators():
    logp = torch.tensor([math.log(0.5), math.log(0.2)])
    ref = torch.tensor([math.log(0.25), math.log(0.4)])
    k1 = kl_estimate(logp, ref, "k1")
    assert k1.tolist() == pytest.approx([math.log(2), math.log(0.5)])
    k3 = kl_estimate(logp, ref, "k3")  # r - log r - 1, r = ref / pi
    assert k3.tolist() == pytest.approx([0.5 - math.log(0.5) - 1, 2 - math.log(2) - 1])
    assert (k3 >= 0).all()
    assert kl_estimate(ref, ref, "k3").tolist() == pytest.approx([0.0, 0.0])


def _algo(*sets):
    from verl_zmq.algos import make_algorithm
    from verl_zmq.envs.make import env_spec

    job = load_job(JOB, list(sets))
    torch.manual_seed(0)
    return make_algorithm(job, env_spec(job.environment)), job


def test_causal_mask_later_tokens_never_change_earlier_logits():
    algo, _ = _algo()
    net = algo.policy_module()
    a = torch.tensor([[DIGIT0 + 1, DIGIT0 + 2, DIGIT0 + 3, SEP, DIGIT0 + 3, 0, 0]])
    b = a.clone()
    b[0, 4:] = torch.tensor([DIGIT0 + 9, DIGIT0 + 5, EOS])
    with torch.no_grad():
        la, lb = net.logits_all(a), net.logits_all(b)
    assert torch.equal(la[0, :4], lb[0, :4])
    assert not torch.allclose(la[0, 4], lb[0, 4])


def test_one_pass_per_response_equals_one_pass_per_step():
    algo, _ = _algo()
    net = algo.policy_module()
    resp = [[DIGIT0 + 4, DIGIT0 + 2, SEP], [DIGIT0 + 7, DIGIT0 + 7, DIGIT0 + 1, SEP]]
    L = 18
    rows, seq = [], []
    for i, r in enumerate(resp):  # each response's buffers, three tokens emitted
        for t in range(3):
            buf = r + [DIGIT0 + 5, DIGIT0 + 6][:t]
            rows.append(buf + [0] * (L - len(buf)))
            seq.append(i)
    obs = torch.tensor(rows, dtype=torch.float32)
    with torch.no_grad():
        each = net.dist(obs).logits
        grouped = net.dist(obs.clone(), torch.tensor(seq)).logits
    assert torch.allclose(each, grouped, atol=1e-5)


def test_vector_env_runs_groups_in_lockstep_rounds():
    env = SeqVectorEnv(num_envs=4, group_size=2, task="reverse")
    obs, _ = env.reset(seed=3)
    assert (obs[0] == obs[1]).all() and (obs[2] == obs[3]).all()
    R = env.round_len
    assert env.round_len == Reverse().max_response + 1
    first = obs.copy()
    eos = np.full(4, act(EOS))
    # env 0 ends at once; the others write digits until the length limit
    ends, voids = [], []
    for _ in range(R):
        a = np.where(np.arange(4) == 0, eos, act(DIGIT0 + 5))
        obs, r, te, tr, info = env.step(a)
        ends.append(te.copy())
        voids.append(info["void"].copy())
    assert ends[0].tolist() == [True, False, False, False]
    assert ends[R - 2].tolist() == [False, True, True, True]  # max_response tokens
    assert voids[1][0] and not voids[1][1]  # env 0 waits for its group
    assert voids[R - 1].all()  # the round's last step only starts the next prompts
    assert not (obs == first).all()
    assert (obs[0] == obs[1]).all()


def test_reverse_scores_exact_and_partial():
    env = SeqEnv(task="reverse", reward="partial")
    obs, _ = env.reset(seed=0)
    k = int((obs != 0).sum())  # the first token, the digits, the separator
    digits = obs[1:k - 1].astype(int)
    rewards, done = [], False
    for tok in [*digits[::-1], EOS]:
        _, r, done, _, _ = env.step(act(int(tok)))
        rewards.append(r)
    assert done and rewards[-1] == 1.0 and sum(rewards[:-1]) == 0.0
    env = SeqEnv(task="reverse", reward="exact")
    env.reset(seed=0)
    wrong = [(int(d) - DIGIT0 + 1) % 10 + DIGIT0 for d in digits[::-1]]
    for tok in [*wrong, EOS]:
        _, r, done, _, _ = env.step(act(tok))
    assert done and r == 0.0


@pytest.mark.parametrize("fn", ["raising_reward", "nan_reward"])
def test_a_failing_reward_function_is_counted_and_scored_as_the_job_says(fn):
    path = f"{__name__}:{fn}"
    env = SeqEnv(task="reverse", reward=path, on_error="zero")
    env.reset(seed=0)
    _, r, te, tr, _ = env.step(act(EOS))
    assert (r, te, tr) == (0.0, True, False)
    assert env.reward_errors == 1
    env = SeqVectorEnv(num_envs=2, group_size=2, task="reverse", reward=path, on_error="drop")
    env.reset(seed=0)
    _, r, te, tr, _ = env.step(np.full(2, act(EOS)))
    assert r.tolist() == [0.0, 0.0] and not te.any() and tr.all()  # dropped: truncated
    assert env.reward_errors == 2


def test_bad_sequence_settings_name_the_key():
    with pytest.raises(ValueError, match="group_size"):
        SeqVectorEnv(num_envs=6, group_size=4)
    with pytest.raises(ValueError, match="on_error"):
        SeqEnv(task="reverse", on_error="ignore")
    with pytest.raises(ValueError, match="environment.kwargs.reward"):
        SeqEnv(task="reverse", reward="no_such_module_here:fn")
    with pytest.raises(ValueError, match="fragment_length"):
        _algo("sampling.fragment_length=12")


def test_grpo_update_learns_only_from_counted_responses():
    """One update on a collected fragment: metrics a post-training user expects,
    and the advantage of each token is its response's."""
    from verl_zmq.batch import job_layout
    from verl_zmq.envs.make import env_spec, make_vector_env
    from verl_zmq.sampling.collector import EnvCollector

    algo, job = _algo("sampling.num_envs_per_worker=16", "environment.kwargs={group_size=8}")
    venv, seeds = make_vector_env(job.environment, 16, 0)
    col = EnvCollector(job, algo, venv, seeds)
    frags = [col.collect()[0] for _ in range(2)]
    batch = job_layout(job, env_spec(job.environment)).concat(frags)
    out = algo.learn(batch).metrics
    for k in ("grpo/reward_mean", "grpo/reward_std", "grpo/response_length",
              "grpo/no_signal_groups", "losses/entropy", "losses/clip_fraction",
              "losses/kl_ref", "charts/kl_ref"):
        assert k in out, k
    assert out["grpo/responses"] == 2 * 16
    assert 1 <= out["grpo/response_length"] <= Reverse().max_response


TOY_REWARD = '''
import os

CALLS = [0]


def score(prompt, response, meta):
    """1 when the response's first digit is the prompt's last; every 7th call fails."""
    CALLS[0] += 1
    if CALLS[0] == 1:
        with open(os.environ["TOY_REWARD_SEEN"], "a") as f:
            f.write(f"{os.getpid()}\\n")
    if CALLS[0] % 7 == 0:
        raise RuntimeError("the reward service is down")
    return float(response[:1] == meta["target"][:1])
'''


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_a_reward_function_from_outside_the_package_runs_end_to_end(tmp_path, monkeypatch):
    """GRPO on reversal with a reward function imported by path from a module that is
    not in the package; it raises on every 7th response: counted, the job goes on."""
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "toy_reward.py").write_text(TOY_REWARD)
    seen = tmp_path / "seen.txt"
    monkeypatch.setenv("PYTHONPATH", f"{mods}:{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.setenv("TOY_REWARD_SEEN", str(seen))
    run = tmp_path / "run"
    proc = start_job(CONFIGS / "reverse_grpo.toml", run,
                     'environment.kwargs={group_size=8, reward="toy_reward:score", '
                     'on_error="zero"}',
                     "sampling.num_workers=1", "training.total_timesteps=25600",
                     "evaluation.interval_steps=12800", "evaluation.n_eval_episodes=20")
    try:
        out, err = proc.communicate(timeout=240)
    finally:
        kill_tree(proc)
    assert proc.returncode == 0, err[-3000:]
    assert json.loads((run / "summary.json").read_text())["status"] == "done"
    assert seen.read_text().strip()  # the samplers called our function
    errors = [e.get("sampler/reward_errors", 0) for e in read_events(run / "logs" /
                                                                    "sampler-0.jsonl")]
    assert max(errors) > 0
    warned = [e for e in read_events(run / "logs" / "sampler-0.jsonl")
              if e.get("event") == "reward_fn_failed"]
    assert warned and "reward service is down" in warned[0]["error"]
    learned = [e for e in read_events(run / "logs" / "learner-0.jsonl")
               if e.get("event") == "metrics" and "grpo/reward_mean" in e]
    assert learned and learned[-1]["learner/updates"] >= 1


def test_a_warm_start_is_the_initial_and_the_reference_policy(tmp_path):
    """`verl sft`'s checkpoint: the job's policy starts from it, the reference is it,
    and a few supervised steps on demonstrations lower the loss."""
    from verl_zmq.seq.sft import run_sft

    job = load_job(JOB, ["evaluation.n_eval_episodes=8"])
    rows: list[dict] = []
    out = tmp_path / "sft.pt"
    r = run_sft(job, steps=30, out=str(out), batch_prompts=16, eval_every=15,
                report=rows.append)
    assert r.steps == 30 and out.exists()
    assert rows[-1]["loss"] < 2.3  # below a uniform guess over 11 tokens: log(11) = 2.4
    algo, _ = _algo(f"algorithm.init_from={out}")
    state = torch.load(out, weights_only=True)
    for k, v in algo.policy_module().state_dict().items():
        assert torch.equal(v, state["policy"][k]), k
    for a, b in zip(algo.ref.parameters(), algo.policy_module().parameters(), strict=True):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="init_from"):
        _algo(f"algorithm.init_from={tmp_path / 'missing.pt'}")


def test_ppo_with_a_critic_and_the_kl_in_the_reward_updates_on_sequences():
    from verl_zmq.algos import make_algorithm
    from verl_zmq.batch import job_layout
    from verl_zmq.envs.make import env_spec, make_vector_env
    from verl_zmq.sampling.collector import EnvCollector

    job = load_job(CONFIGS / "reverse_ppo.toml", ["sampling.num_envs_per_worker=8"])
    algo = make_algorithm(job, env_spec(job.environment))
    venv, seeds = make_vector_env(job.environment, 8, 0)
    col = EnvCollector(job, algo, venv, seeds)
    batch = job_layout(job, env_spec(job.environment)).concat([col.collect()[0]])
    out = algo.learn(batch).metrics
    assert "charts/kl_ref" in out and "losses/kl_ref" not in out  # a penalty, not a loss
    assert np.isfinite(out["losses/value_loss"])


def test_acting_with_the_key_value_cache_gives_the_whole_prefix_logits():
    """Over rounds of a sampler's vector env (new prompts, growing buffers, finished
    responses waiting, every row anew at a round's start) the cached acting path
    and a whole-prefix pass agree."""
    algo, _ = _algo()
    net = algo.policy_module()
    env = SeqVectorEnv(num_envs=6, group_size=2, task="reverse")
    obs, _ = env.reset(seed=1)
    rng = np.random.default_rng(0)
    with torch.no_grad():
        for _ in range(3 * env.round_len):
            o = torch.as_tensor(obs)
            cached = net.dist(o, acting=True).logits
            whole = net.dist(o.clone()).logits
            assert torch.allclose(cached, whole, atol=1e-5)
            a = rng.integers(0, 11, 6)
            obs, *_ = env.step(a)
        odd = torch.as_tensor(obs[::-1].copy())  # rows that match nothing cached
        assert torch.allclose(net.dist(odd, acting=True).logits, net.dist(odd.clone()).logits,
                              atol=1e-5)
