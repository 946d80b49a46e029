"""`verl serve --http`: a recurrent Dict policy answered over JSON and msgpack
(state in and out, as the checkpoint acts), masks honoured, requests batched
together, a shadow's disagreements logged and counted, /health and /metrics,
and 8 kinds of bad request each answered 4xx with the server answering after."""

from __future__ import annotations

import asyncio

import gymnasium as gym
import msgpack
import numpy as np
import pytest

from tests.test_spaces_export import _checkpoint

if "verl/MaskedChoice-v0" not in gym.registry:
    gym.register("verl/MaskedChoice-v0", entry_point="tests.ma_envs:MaskedChoice")


class Log:
    """A log that keeps its events."""

    def __init__(self):
        self.events: list[tuple[str, dict]] = []

    def info(self, event, **kw):
        self.events.append((event, kw))

    warning = info


def _client(model, **kw):
    from fastapi.testclient import TestClient

    from verl_zmq.ops.serve_http import make_app

    log = Log()
    return TestClient(make_app(model, log, **kw)), log


def test_a_recurrent_dict_policy_over_json_and_msgpack(tmp_path):
    from verl_zmq.ops.export import export, load_policy
    from verl_zmq.ops.serve import pack_array, unpack_array

    ckpt, batch, _ = _checkpoint(tmp_path, "gru-dict")
    lp = load_policy(ckpt)
    model = export(ckpt, "torchscript", tmp_path / "p.pt")
    rows = {k: v[:4] for k, v in batch.items()}
    zeros = (np.zeros((4, 8), np.float32), np.zeros(4, bool))
    want, want_state = lp.actions(rows, True, zeros)
    client, _ = _client(model)
    with client:
        instances = [{k: v[i].tolist() for k, v in rows.items()} for i in range(4)]
        r = client.post("/predict", json={"instances": instances})
        assert r.status_code == 200, r.text
        got = r.json()
        np.testing.assert_array_equal(np.asarray(got["actions"]), want)
        np.testing.assert_allclose(np.asarray(got["states"]), want_state, atol=1e-5)
        # the state handed back continues the episodes
        r = client.post("/predict", json={"instances": instances, "states": got["states"]})
        again = lp.actions(rows, True, (np.asarray(got["states"], np.float32),
                                        np.zeros(4, bool)))[0]
        np.testing.assert_array_equal(np.asarray(r.json()["actions"]), again)
        # one observation, msgpack, with packed arrays
        body = msgpack.packb({"obs": {k: pack_array(v[0]) for k, v in rows.items()}},
                             use_bin_type=True)
        r = client.post("/predict", content=body,
                        headers={"Content-Type": "application/msgpack"})
        assert r.status_code == 200, r.text
        assert r.headers["content-type"] == "application/msgpack"
        one = msgpack.unpackb(r.content)
        assert int(unpack_array(one["action"], min_dims=0)) == int(want[0])
        assert unpack_array(one["state"]).shape == (8,)
        assert client.get("/health").json()["recurrent"] is True


def test_masks_batches_a_shadow_and_bad_requests(tmp_path):
    from verl_zmq.checkpoint import policy_state, save_atomic
    from verl_zmq.config import dumps_job, loads_job
    from verl_zmq.envs.make import env_spec
    from verl_zmq.ops.export import export
    from verl_zmq.policy.numpy_actor import make_actor

    job = loads_job('[experiment]\nname = "m"\n[environment]\nid = "verl/MaskedChoice-v0"\n'
                    '[algorithm]\nname = "ppo"\n[training]\ntotal_timesteps = 1000\n')
    spec = env_spec(job.environment)
    models = []
    for seed in (0, 1):  # two policies: the model and a shadow that acts otherwise
        actor = make_actor(job, spec, (0, 1), (seed, seed))
        arrays = {k: v + np.random.default_rng(seed).normal(size=v.shape).astype(v.dtype)
                  if "weight" in k else v for k, v in actor.arrays.items()}
        path = tmp_path / f"m{seed}.pt"
        save_atomic(policy_state(dumps_job(job), "ppo", arrays, None, env_steps=1), path)
        models.append(export(path, "onnx", tmp_path / f"m{seed}.onnx"))
    client, log = _client(models[0], shadow=models[1], max_batch=64, batch_wait_ms=20)
    env = gym.make("verl/MaskedChoice-v0")
    with client:
        obs = []
        for i in range(200):
            o, _ = env.reset(seed=i)
            obs.append({"obs.action_mask": o["action_mask"].tolist(),
                        "obs.obs": o["obs"].tolist()})
        r = client.post("/predict", json={"instances": obs[:64]})
        acts = r.json()["actions"]
        assert all(o["obs.action_mask"][a] == 1 for o, a in zip(obs, acts))

        # concurrent requests are answered together
        async def many():
            import httpx

            transport = httpx.ASGITransport(app=client.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
                rs = await asyncio.gather(*(c.post("/predict", json={"obs": o})
                                            for o in obs[64:128]))
            return [x.json()["action"] for x in rs]

        single = client.portal.call(many)
        assert all(o["obs.action_mask"][a] == 1 for o, a in zip(obs[64:128], single))
        metrics = client.get("/metrics").text
        counts = {ln.split()[0]: float(ln.split()[1]) for ln in metrics.splitlines()
                  if ln and not ln.startswith("#")}
        # 65 batches at most for 65 requests; fewer when requests shared a call
        assert counts["verl_serve_batch_rows_count"] < 65, metrics
        assert counts["verl_serve_batch_rows_sum"] == 128
        assert counts["verl_serve_shadow_rows_total"] == 128
        assert counts["verl_serve_shadow_differs_total"] > 0
        said = [kw for e, kw in log.events if e == "shadow_differs"]
        assert said and {"action", "shadow_action", "obs"} <= set(said[0])

        bad = {  # kind: (body, headers, status)
            "malformed JSON": (b'{"obs": [1, 2', {}, 400),
            "not an object": (b"[1, 2]", {}, 400),
            "neither obs nor instances": (b'{"x": 1}', {}, 400),
            "a missing column": (b'{"obs": {"obs.obs": [0, 0, 0, 0, 0, 0]}}', {}, 422),
            "a wrong shape": (b'{"obs": {"obs.obs": [0, 0], "obs.action_mask": [1, 1]}}',
                              {}, 422),
            "a wrong dtype": (b'{"obs": {"obs.obs": ["a", 0, 0, 0, 0, 0], '
                              b'"obs.action_mask": [1, 1, 1, 1, 1, 1]}}', {}, 422),
            "an oversized body": (b" " * (9 << 20), {}, 413),
            "an unknown content type": (b"1,2", {"Content-Type": "text/csv"}, 415),
        }
        for kind, (body, headers, status) in bad.items():
            for _ in range(25):
                r = client.post("/predict", content=body, headers=headers)
                assert r.status_code == status, (kind, r.status_code, r.text)
                assert "error" in r.json(), kind
        assert client.post("/predict", json={"obs": obs[0]}).status_code == 200
        assert client.get("/health").json()["status"] == "ok"
        text = client.get("/metrics").text
        assert 'verl_serve_errors_total{status="422"} 75' in text


@pytest.mark.parametrize("shadow_inputs", ["differ"])
def test_a_shadow_that_takes_other_inputs_is_refused(tmp_path, shadow_inputs):
    from verl_zmq.ops.export import export

    ckpt_a, _, _ = _checkpoint(tmp_path, "dict")
    ckpt_b, _, _ = _checkpoint(tmp_path, "lstm")
    a = export(ckpt_a, "onnx", tmp_path / "a.onnx")
    b = export(ckpt_b, "onnx", tmp_path / "b.onnx")
    from verl_zmq.ops.serve_http import make_app

    with pytest.raises(ValueError, match="a shadow answers the same requests"):
        make_app(a, Log(), shadow=b)
