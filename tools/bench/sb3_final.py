#!/usr/bin/env python
"""One Stable-Baselines3 run with rl-baselines3-zoo's hyperparameters to the
budget, its final model then evaluated as `tools/bench/suite.py` evaluates ours:
deterministic, one episode per seed from `first_seed`, observations normalised
with the training statistics frozen (the zoo's `normalize: true` is SB3's
VecNormalize). Run by `bench_suite.py --sb3` in a process of its own; prints one
JSON line: {"final": mean return, "wall_s": training seconds}.

    python tools/bench/sb3_final.py '{"algo": "PPO", "env": "Acrobot-v1", "n_envs": 16,
        "normalize": true, "kwargs": {"n_steps": 256}, "budget": 1000000,
        "seed": 0, "episodes": 100, "first_seed": 1000000}'

`"algo": "RecurrentPPO"` (sb3-contrib) trains an MlpLstmPolicy and evaluates it
carrying its LSTM state through each episode; `policy_kwargs.activation_fn`
names the activation ("relu", "tanh"). The package's env ids (verl/...) are
registered here too.
"""

from __future__ import annotations

import json
import sys
import time


def schedule(v):
    """The zoo's "lin_X": X decaying linearly to 0 over the run."""
    if isinstance(v, str) and v.startswith("lin_"):
        x = float(v[4:])
        return lambda progress_remaining: progress_remaining * x
    return v


def main(cfg: dict) -> dict:
    import gymnasium as gym
    import numpy as np
    import torch
    from stable_baselines3 import DQN, PPO, SAC
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    import verl_zmq.envs.tasks  # noqa: F401  (registers verl/CartPoleNoVel-v1 and others)

    torch.set_num_threads(cfg.get("threads", 1))
    env = make_vec_env(cfg["env"], n_envs=cfg["n_envs"], seed=cfg["seed"])
    if cfg.get("normalize"):
        env = VecNormalize(env, gamma=cfg["kwargs"].get("gamma", 0.99))
    kwargs = {k: schedule(v) for k, v in cfg["kwargs"].items()}
    pk = dict(kwargs.pop("policy_kwargs", {}))
    if "activation_fn" in pk:
        pk["activation_fn"] = {"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh}[pk["activation_fn"]]
    recurrent = cfg["algo"] == "RecurrentPPO"
    if recurrent:
        from sb3_contrib import RecurrentPPO

        model = RecurrentPPO("MlpLstmPolicy", env, seed=cfg["seed"], verbose=0,
                             policy_kwargs=pk, **kwargs)
    else:
        model = {"PPO": PPO, "DQN": DQN, "SAC": SAC}[cfg["algo"]](
            "MlpPolicy", env, seed=cfg["seed"], verbose=0, policy_kwargs=pk or None, **kwargs)
    t0 = time.time()
    model.learn(cfg["budget"])
    wall = time.time() - t0
    returns = []
    for i in range(cfg["episodes"]):
        e = gym.make(cfg["env"])
        obs, _ = e.reset(seed=cfg["first_seed"] + i)
        total, done, state, start = 0.0, False, None, np.ones(1, bool)
        while not done:
            o = env.normalize_obs(obs) if cfg.get("normalize") else obs
            if recurrent:  # the LSTM state through the episode, as RecurrentPPO's docs do
                action, state = model.predict(o, state=state, episode_start=start,
                                              deterministic=True)
                start = np.zeros(1, bool)
            else:
                action, _ = model.predict(o, deterministic=True)
            obs, r, te, tr, _ = e.step(action)
            total += float(r)
            done = te or tr
        e.close()
        returns.append(total)
    return {"final": float(np.mean(returns)), "wall_s": wall}


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))), flush=True)
