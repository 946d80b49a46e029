"""Every policy leaves the cluster alike: a recurrent (LSTM) policy, a Dict-
observation one and a MultiDiscrete one exported as TorchScript and ONNX
(the state an input and an output) give the checkpoint's actions on a recorded
rollout; the Python API's recurrent policy keeps or takes its state."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import CONFIGS

CASES = {  # name: job, overrides
    "lstm": ("cartpole_novel_lstm.toml", ["algorithm.policy.recurrent_size=8"]),
    "gru-dict": ("goalgrid_ppo.toml", ['algorithm.policy.recurrent="gru"',
                                      "algorithm.policy.recurrent_size=8",
                                      "environment.normalize_obs=true",
                                      "environment.kwargs={goal_index=true}"]),
    "dict": ("goalgrid_ppo.toml", ["environment.normalize_obs=true"]),
    "multidiscrete": ("jointchoice_ppo.toml", []),
}


def _checkpoint(tmp_path, name):
    """A checkpoint of perturbed weights, and a recorded rollout: raw observations
    and which of them start an episode."""
    import torch

    from verl_zmq.algos import make_algorithm
    from verl_zmq.checkpoint import policy_state, save_atomic
    from verl_zmq.config import dumps_job, load_job
    from verl_zmq.envs.make import env_spec, make_env
    from verl_zmq.envs.spaces import split
    from verl_zmq.normalize import obs_norm

    torch.manual_seed(0)
    job_file, over = CASES[name]
    job = load_job(CONFIGS / job_file, over)
    spec = env_spec(job.environment)
    algo = make_algorithm(job, spec)
    with torch.no_grad():  # weights off their init; biases left (they would decide alone)
        for key, p in algo.policy_module().named_parameters():
            if "bias" not in key:
                p.add_(torch.randn_like(p))
    env = make_env(job.environment)
    obs, _ = env.reset(seed=0)
    raw, starts, first = [], [], True
    for _ in range(300):
        raw.append(obs)
        starts.append(first)
        obs, _, te, tr, _ = env.step(env.action_space.sample())
        first = te or tr
        if first:
            obs, _ = env.reset()
    batch = split({k: np.stack([o[k] for o in raw]) for k in raw[0]}, spec.leaves) \
        if spec.structured else np.asarray(raw, np.float32)
    rms = obs_norm(spec)
    rms.update(batch)
    path = tmp_path / f"{name}.pt"
    save_atomic(policy_state(dumps_job(job), job.algorithm.name, algo.policy_arrays(),
                             rms.to_arrays(), env_steps=1), path)
    return path, batch, np.asarray(starts)


def _rows(batch, i):
    return {k: v[i:i + 1] for k, v in batch.items()} if isinstance(batch, dict) \
        else batch[i:i + 1]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", sorted(CASES))
def test_exported_policies_match_the_checkpoint(tmp_path, name):
    import onnxruntime as ort
    import torch

    from verl_zmq.ops.export import export, load_policy
    from verl_zmq.ops.serve import Runner

    ckpt, batch, starts = _checkpoint(tmp_path, name)
    lp = load_policy(ckpt)
    S = int(getattr(lp.algo, "state_size", 0))
    n = len(starts)
    # the checkpoint's actions, one step at a time with its state (zeros at a start)
    expected, state = [], np.zeros((1, S), np.float32)
    for i in range(n):
        if S:
            if starts[i]:
                state = np.zeros_like(state)
            a, state = lp.actions(_rows(batch, i), True, (state, np.zeros(1, bool)))
        else:
            a = lp.actions(_rows(batch, i))
        expected.append(a)
    expected = np.concatenate(expected)
    assert len(np.unique(expected.reshape(n, -1), axis=0)) > 1
    export(ckpt, "torchscript", tmp_path / "p.ts")
    export(ckpt, "onnx", tmp_path / "p.onnx")
    for runner in (Runner(tmp_path / "p.ts"), Runner(tmp_path / "p.onnx")):
        assert runner.recurrent == bool(S)
        assert runner.inputs[:len(runner.inputs) - bool(S)] == [
            leaf.column for leaf in lp.spec.leaves]
        got, state = [], np.zeros((1, S), np.float32)
        for i in range(n):
            row = _rows(batch, i)
            xs = [row[c] for c in runner.inputs if c != "state"] if isinstance(row, dict) \
                else [row]
            if S:
                if starts[i]:
                    state = np.zeros_like(state)
                out = runner([*xs, state])
                state = out[1]
            else:
                out = runner(xs)
            got.append(out[0])
        np.testing.assert_array_equal(np.concatenate(got), expected)
    del ort, torch


def test_api_recurrent_policy_keeps_or_takes_its_state(tmp_path):
    import verl_zmq

    ckpt, batch, starts = _checkpoint(tmp_path, "lstm")
    policy = verl_zmq.load_policy(ckpt)
    assert policy.recurrent and policy.initial_state(3).shape == (3, policy.state_size)
    state = policy.initial_state(1)
    kept, given = [], []
    for i in range(40):
        if i and starts[i]:
            policy.reset()
            state = policy.initial_state(1)
        kept.append(policy.act(batch[i]))
        a, state = policy.act(batch[i:i + 1], state=state)
        given.append(a[0])
    assert kept == given
    # a batch of envs, episode starts marked per env
    a, s2 = policy.act(batch[:4], state=policy.initial_state(4),
                       episode_start=np.ones(4, bool))
    assert a.shape == (4,) and s2.shape == (4, policy.state_size)


def test_serve_answers_structured_and_recurrent_requests(tmp_path):
    """`verl serve`'s request handling: a Dict observation as a map of columns, a
    recurrent policy's state in and out (zeros when absent), errors named."""
    import msgpack

    from verl_zmq.ops.export import export, load_policy
    from verl_zmq.ops.serve import PolicyServer, pack_array, unpack_array

    ckpt, batch, _ = _checkpoint(tmp_path, "gru-dict")
    lp = load_policy(ckpt)
    server = PolicyServer(export(ckpt, "onnx", tmp_path / "p.onnx"), "tcp://127.0.0.1:*",
                          log=None)  # handle() logs nothing
    try:
        rows = {k: v[:4] for k, v in batch.items()}
        req = {"obs": {k: pack_array(v) for k, v in rows.items()}}
        first = server.handle([msgpack.packb(req, use_bin_type=True)])
        assert "state" in first, first
        state = unpack_array(first["state"])
        expected, want_state = lp.actions(rows, True, (np.zeros((4, 8), np.float32),
                                                       np.zeros(4, bool)))
        np.testing.assert_array_equal(unpack_array(first["action"]), expected)
        np.testing.assert_allclose(state, want_state, atol=1e-5)
        again = server.handle([msgpack.packb(req | {"state": pack_array(state)},
                                             use_bin_type=True)])
        np.testing.assert_array_equal(unpack_array(again["action"]),
                                      lp.actions(rows, True, (state, np.zeros(4, bool)))[0])
        missing = server.handle([msgpack.packb({"obs": {"obs.goal": req["obs"]["obs.goal"]}},
                                               use_bin_type=True)])
        assert "obs.position" in missing["error"]
    finally:
        server.sock.close(0)
