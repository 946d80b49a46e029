"""Image observations: Catch's dynamics, uint8 kept from the env through the
sampler's fragment and the wire to the learner's batch, the convolutional
encoders' shapes, and a PPO update on images."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.conftest import CONFIGS, run_events
from verl_zmq import wire
from verl_zmq.batch import job_layout
from verl_zmq.config import load_job
from verl_zmq.envs.make import env_spec, make_vector_env
from verl_zmq.pixels.catch import CatchEnv
from verl_zmq.policy.cnn import encoder
from verl_zmq.sampling.collector import EnvCollector

JOB = CONFIGS / "catch_ppo.toml"


def test_catch_ends_after_the_ball_falls_with_plus_or_minus_one():
    env = CatchEnv(rows=10, cols=5, scale=2)
    obs, _ = env.reset(seed=3)
    assert obs.shape == (20, 10, 1) and obs.dtype == np.uint8
    assert set(np.unique(obs)) == {0, 255}
    ball_col = int(np.argmax(obs[0, :, 0])) // 2
    steps, done, r = 0, False, 0.0
    while not done:
        paddle = int(np.argmax(obs[-1, :, 0])) // 2
        action = 1 + int(np.sign(ball_col - paddle))  # follow the ball
        obs, r, done, trunc, _ = env.step(action)
        steps += 1
    assert steps == 9 and r == 1.0
    env.reset(seed=3)
    for _ in range(9):  # always left: misses a ball that is not in the first column
        _, r, done, _, _ = env.step(0)
    assert done and r == (1.0 if ball_col == 0 else -1.0)


def _collector(job):
    from verl_zmq.algos import make_algorithm

    spec = env_spec(job.environment)
    torch.manual_seed(0)
    algo = make_algorithm(job, spec)
    venv, seeds = make_vector_env(job.environment, job.sampling.num_envs_per_worker, 0)
    return EnvCollector(job, algo, venv, seeds), algo, spec


def test_images_stay_uint8_from_the_env_to_the_learners_batch():
    job = load_job(JOB, ["sampling.num_envs_per_worker=4"])
    col, algo, spec = _collector(job)
    frag, version = col.collect()
    assert frag["obs"].dtype == np.uint8 and frag["bootstrap_obs"].dtype == np.uint8
    layout = job_layout(job, spec)
    assert layout.problem(frag) == ""
    back = wire.decode([bytes(f) for f in wire.encode(wire.Fragment(version=version,
                                                                    arrays=frag))])
    assert back.arrays["obs"].dtype == np.uint8
    assert np.array_equal(back.arrays["obs"], frag["obs"])
    batch = layout.concat([dict(back.arrays.items()), frag])
    assert batch["obs"].dtype == np.uint8
    out = algo.learn(batch).metrics  # the network takes the uint8 images itself
    assert np.isfinite(out["losses/policy_loss"]) and np.isfinite(out["losses/value_loss"])


@pytest.mark.parametrize("kind,shape,units", [("nature_cnn", (84, 84, 4), 512),
                                              ("impala_cnn", (84, 84, 4), 256),
                                              ("impala_cnn", (20, 10, 1), 256)])
def test_encoders_output_shape(kind, shape, units):
    enc, n = encoder(kind, shape)
    x = torch.randint(0, 256, (3, *shape), dtype=torch.uint8)
    assert n == units and enc(x).shape == (3, units)


def test_an_encoder_that_does_not_fit_the_images_says_so():
    with pytest.raises(ValueError, match="impala_cnn for small images"):
        encoder("nature_cnn", (20, 10, 1))
    with pytest.raises(ValueError, match="image observations"):
        encoder("impala_cnn", (4,))


def test_stacked_frames_are_the_last_n_frames():
    from verl_zmq.config import Environment
    from verl_zmq.envs.make import make_env

    kw = {"rows": 10, "cols": 5, "scale": 2}
    stacked = make_env(Environment(id="verl/Catch-v0", kwargs=kw, frame_stack=3))
    plain = make_env(Environment(id="verl/Catch-v0", kwargs=kw))
    assert stacked.observation_space.shape == (20, 10, 3)
    frames = [plain.reset(seed=5)[0]] * 3  # the first frame fills the stack at reset
    obs, _ = stacked.reset(seed=5)
    for t in range(8):
        assert obs.dtype == np.uint8 and np.array_equal(obs, np.concatenate(frames[-3:], -1))
        a = t % 3
        obs = stacked.step(a)[0]
        frames.append(plain.step(a)[0])


def test_the_atari_preset_trains_on_lives_and_clipped_rewards_and_evaluates_games():
    pytest.importorskip("ale_py", reason="the atari extra: pip install -e '.[atari]'")
    from verl_zmq.config import Environment
    from verl_zmq.envs.make import env_spec, make_env

    cfg = Environment(id="ALE/Breakout-v5", preset="atari")
    assert env_spec(cfg).obs_shape == (84, 84, 4)
    train = make_env(cfg)
    obs, _ = train.reset(seed=0)
    assert obs.shape == (84, 84, 4) and obs.dtype == np.uint8
    rng = np.random.default_rng(0)
    for _ in range(5000):  # random play: a life is lost within a few hundred
        obs, r, term, trunc, info = train.step(int(rng.integers(4)))
        assert r in (-1.0, 0.0, 1.0)
        if term or trunc:
            break
    assert term and info["lives"] > 0  # a lost life ended the training episode
    game = make_env(cfg, training=False)
    game.reset(seed=0)
    for _ in range(20_000):  # a policy that never presses FIRE: the game goes on
        _, r, term, trunc, info = game.step(0)
        if term or trunc:
            break
    assert term and info["lives"] == 0  # evaluation plays the whole game


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_breakout_trains_from_pixels_in_one_process(tmp_path):
    """The shipped Atari config end to end, briefly: uint8 stacks through the
    pipeline, PPO updates on the Nature CNN, an evaluation of a whole game."""
    pytest.importorskip("ale_py", reason="the atari extra: pip install -e '.[atari]'")
    # a game capped at 4,000 frames: an untrained policy's evaluation may otherwise
    # play for minutes
    evs = run_events("breakout_ppo.toml", tmp_path, "training.total_timesteps=1024",
                     "environment.max_episode_steps=4000",
                     "evaluation.interval_steps=1024", "evaluation.n_eval_episodes=1",
                     "sampling.fragment_length=64", "algorithm.params.batch_size=512",
                     timeout=280)
    done = [e for e in evs if e.get("event") == "training_finished"]
    assert done and done[0]["env_steps"] >= 1024 and done[0]["updates"] >= 2
    evals = [e for e in evs if e.get("event") == "evaluated"]
    assert evals and evals[-1]["eval/return_mean"] >= 0.0


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_dqn_with_a_convolutional_encoder_trains_on_uint8_images(tmp_path):
    """DQN on images, briefly: the encoder before the Q head, uint8 images through
    the prioritised replay into sampled batches that the learner accepts (how far
    it learns: `python tools/bench/seeds.py --job configs/catch_dqn.toml --target 0.9`)."""
    evs = run_events("catch_dqn.toml", tmp_path, "training.total_timesteps=2000",
                     "replay.min_size_to_sample=500", "replay.samples_per_insert=8",
                     "evaluation.interval_steps=2000", "evaluation.n_eval_episodes=10",
                     "evaluation.stop_at_return=2.0", timeout=280)
    assert not [e for e in evs if e.get("event") == "message_rejected"]
    done = [e for e in evs if e.get("event") == "training_finished"]
    assert done and done[0]["env_steps"] >= 2000 and done[0]["updates"] >= 50
    assert [e for e in evs if e.get("event") == "evaluated"]


def test_sac_with_convolutional_encoders_updates_on_uint8_images():
    """SAC on images: the actor and the critic each put an encoder before their MLP;
    uint8 batches update both, actions stay in the env's bounds."""
    from verl_zmq.algos import make_algorithm
    from verl_zmq.envs.make import EnvSpec

    torch.set_num_threads(1)
    torch.manual_seed(0)
    job = load_job(CONFIGS / "pendulum_sac.toml", ['algorithm.policy.encoder="impala_cnn"'])
    assert job.traits.encoders and not job.traits.numpy_actor  # samplers act with torch
    spec = EnvSpec(obs_shape=(12, 12, 3), discrete=False, n_actions=1, action_shape=(1,),
                   action_low=(-2.0,), action_high=(2.0,))
    algo = make_algorithm(job, spec)
    assert algo.actor.enc is not None and algo.critic.enc is not None
    rng = np.random.default_rng(0)
    n = 32
    batch = {"obs": rng.integers(0, 256, (n, 12, 12, 3), dtype=np.uint8),
             "next_obs": rng.integers(0, 256, (n, 12, 12, 3), dtype=np.uint8),
             "action": rng.uniform(-1, 1, (n, 1)).astype(np.float32),
             "reward": rng.standard_normal(n).astype(np.float32),
             "discount": np.full(n, 0.99, np.float32), "weight": np.ones(n, np.float32)}
    enc_before = [p.detach().clone() for p in algo.critic.enc.parameters()]
    pi_before = [p.detach().clone() for p in algo.actor.enc.parameters()]
    out = algo.learn(batch)
    assert all(np.isfinite(v) for v in out.metrics.values())
    assert any(not torch.equal(a, b) for a, b in zip(enc_before, algo.critic.enc.parameters()))
    assert any(not torch.equal(a, b) for a, b in zip(pi_before, algo.actor.enc.parameters()))
    act, _ = algo.act(batch["obs"][:4])
    env_act = algo.env_action(act)
    assert env_act.shape == (4, 1) and (np.abs(env_act) <= 2.0).all()
