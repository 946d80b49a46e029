"""A policy leaves the cluster: `verl export` (TorchScript, ONNX run by
onnxruntime) gives the PyTorch policy's actions on 1,000 recorded observations;
`verl serve` answers 1,000 client requests, reports latency percentiles, and
answers malformed requests with an error while it keeps serving, and a
client of a stopped server gets a TimeoutError at its deadline; `verl eval`
evaluates a checkpoint by hand."""

from __future__ import annotations

import contextlib
import signal
import subprocess

import msgpack
import numpy as np
import pytest

from tests.conftest import (
    CONFIGS,
    PY,
    ROOT,
    free_port_range,
    read_events,
    verl,
    verl_here,
    wait_for,
)

pytestmark = pytest.mark.e2e  # real processes

CASES = {  # name: job, overrides (normalisation on where the algorithm allows it)
    "ppo-discrete": ("cartpole_ppo.toml", ["environment.normalize_obs=true"]),
    "ppo-gaussian": ("cartpole_ppo.toml", ['environment.id="Pendulum-v1"',
                                           "environment.normalize_obs=true"]),
    "dqn": ("cartpole_dqn.toml", ["algorithm.policy.dueling=true"]),
    "sac": ("pendulum_sac.toml", ["environment.normalize_obs=true"]),
    "ppo-pixels": ("catch_ppo.toml", []),
    "dqn-pixels": ("catch_dqn.toml", []),
}


def _checkpoint(tmp_path, name: str):
    """A checkpoint as the learner writes it, after a few updates on real env data."""
    import torch

    from verl_zmq.algos import make_algorithm
    from verl_zmq.checkpoint import policy_state, save_atomic
    from verl_zmq.config import dumps_job, load_job
    from verl_zmq.envs.make import env_spec, make_env
    from verl_zmq.normalize import RunningMeanStd

    torch.manual_seed(0)
    job_file, over = CASES[name]
    job = load_job(CONFIGS / job_file, over)
    spec = env_spec(job.environment)
    algo = make_algorithm(job, spec)
    # perturb every parameter so the heads are not at their (near-zero) init; a
    # discrete head needs more to vary its argmax over CartPole's small observations
    scale = 1.0 if spec.discrete else 0.2
    with torch.no_grad():
        for p in algo.policy_module().parameters():
            p.add_(scale * torch.randn_like(p))
    env = make_env(job.environment)
    rng = np.random.default_rng(0)
    obs, _ = env.reset(seed=0)
    recorded = []
    for _ in range(1000):  # recorded observations from a random-action rollout
        recorded.append(obs)
        obs, _, te, tr, _ = env.step(env.action_space.sample())
        if te or tr:
            obs, _ = env.reset(seed=int(rng.integers(1 << 30)))
    recorded = np.asarray(recorded, np.float32)
    rms = RunningMeanStd(spec.obs_shape)
    rms.update(recorded)
    path = tmp_path / f"{name}.pt"
    save_atomic(policy_state(dumps_job(job), job.algorithm.name, algo.policy_arrays(),
                             rms.to_arrays(), env_steps=1234), path)
    return path, recorded


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", sorted(CASES))
def test_exported_policies_match_pytorch(tmp_path, name):
    import onnxruntime as ort
    import torch

    from verl_zmq.ops.export import export, load_policy

    ckpt, obs = _checkpoint(tmp_path, name)
    lp = load_policy(ckpt)
    expected = lp.actions(obs)
    if name == "dqn":  # the command line, once: the same code path as the function
        r = verl("export", str(ckpt), "--format", "onnx", "-o", str(tmp_path / "p.onnx"))
        assert r.returncode == 0, r.stderr[-2000:]
        export(ckpt, "torchscript", tmp_path / "p.ts")
    else:
        export(ckpt, "torchscript", tmp_path / "p.ts")
        export(ckpt, "onnx", tmp_path / "p.onnx")
    with torch.no_grad():
        ts = torch.jit.load(str(tmp_path / "p.ts"))(torch.from_numpy(obs)).numpy()
    ox = ort.InferenceSession(str(tmp_path / "p.onnx")).run(None, {"obs": obs})[0]
    for got in (ts, ox):
        assert got.shape == expected.shape
        if lp.spec.discrete:
            assert (got == expected).all()
        else:
            np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)
    if lp.spec.discrete:
        assert len(np.unique(expected)) > 1  # a policy that always says 0 proves nothing


@pytest.mark.timeout(300)
def test_serve_answers_requests_reports_latency_and_survives_bad_ones(tmp_path):
    from verl_zmq.ops.export import export, load_policy
    from verl_zmq.ops.serve import PolicyClient, ServeError, pack_array

    ckpt, obs = _checkpoint(tmp_path, "sac")
    expected = load_policy(ckpt).actions(obs)
    model = export(ckpt, "onnx", tmp_path / "p.onnx")
    port = free_port_range()[0]
    log = tmp_path / "serve.jsonl"
    with open(log, "w") as out:
        server = subprocess.Popen([PY, "-m", "verl_zmq.cli", "serve", str(model), "--bind",
                                   f"tcp://127.0.0.1:{port}", "--report-s", "1",
                                   "--obs-shape", "3"], cwd=ROOT, stdout=out,
                                  stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: any(e.get("event") == "serving" for e in read_events(log)), 60,
                 what="the server to bind")
        client = PolicyClient(f"tcp://127.0.0.1:{port}")
        got = np.concatenate([client.act(obs[i:i + 1]) for i in range(1000)])
        np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)
        bad = [b"\xc1garbage", msgpack.packb([1, 2, 3]), msgpack.packb({"obs": 5}),
               msgpack.packb({"obs": {"dtype": "object", "shape": [1, 3], "data": b"x"}}),
               msgpack.packb({"obs": pack_array(np.zeros((2, 3), np.float32))
                              | {"data": b"short"}}),
               msgpack.packb({"obs": pack_array(np.zeros((2, 5), np.float32))})]
        for payload in bad:
            reply = client.request(payload)
            assert set(reply) == {"error"} and reply["error"], reply
        with pytest.raises(ServeError):
            client.act(np.zeros((1, 7)))
        np.testing.assert_allclose(client.act(obs[:5]), expected[:5], atol=1e-5)  # still up
        client.close()
        # a server that stops answering (stopped, hung) is a TimeoutError at the
        # client's deadline, not a wait forever; the same client works once it is back
        client = PolicyClient(f"tcp://127.0.0.1:{port}", timeout_s=1.0)
        server.send_signal(signal.SIGSTOP)
        try:
            with pytest.raises(TimeoutError, match="no reply from tcp://127.0.0.1"):
                client.act(obs[:1])
        finally:
            server.send_signal(signal.SIGCONT)
        for _ in range(60):  # a loaded machine may take more than a second to answer
            with contextlib.suppress(TimeoutError):
                np.testing.assert_allclose(client.act(obs[:1]), expected[:1], atol=1e-5)
                break
        else:
            raise AssertionError("the client never got a reply once the server was back")
        client.close()
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)
    assert server.returncode == 0, server.stderr.read()[-2000:]
    reports = [e for e in read_events(log) if e.get("event") == "serve_latency"]
    assert reports and sum(e["window"] for e in reports) >= 1000 + len(bad) + 2
    assert reports[-1]["requests"] >= 1008 and reports[-1]["errors"] == len(bad) + 1
    assert all(0 < e["p50_ms"] <= e["p99_ms"] for e in reports)


@pytest.mark.timeout(300)
def test_verl_eval_prints_the_checkpoints_return(tmp_path):
    ckpt, _ = _checkpoint(tmp_path, "dqn")
    r = verl_here("eval", str(ckpt), "--episodes", "3", "--seed", "5")
    assert r.returncode == 0, r.stderr[-2000:]
    line = r.stdout.strip().splitlines()[-1]
    nums = dict(zip(line.split()[::2], line.split()[1::2]))
    assert nums["episodes"] == "3"
    assert float(nums["min"]) <= float(nums["mean"]) <= float(nums["max"])
    bad = tmp_path / "junk.pt"
    bad.write_bytes(b"not a checkpoint")
    r = verl_here("eval", str(bad))
    assert r.returncode == 2 and "cannot load a policy" in r.stderr
