"""Any gymnasium space: nested Dict and Tuple observations become one typed
column per leaf that round-trip the wire and a replay snapshot bit for bit; a
fragment whose keys, shapes or dtypes disagree is refused at the shard; an
action space an algorithm does not take is a one-line error before anything
starts."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import CONFIGS
from verl_zmq import wire
from verl_zmq.batch import job_layout
from verl_zmq.config import load_job
from verl_zmq.envs.make import env_spec, make_vector_env
from verl_zmq.envs.spaces import features, obs_leaves, split
from verl_zmq.policy.numpy_actor import make_actor
from verl_zmq.sampling.collector import EnvCollector

NESTED = ['environment.id="tests.envs:NestedObsEnv"']


def _fragment(job_file: str, overrides: list[str], n: int = 1):
    job = load_job(CONFIGS / job_file, overrides)
    spec = env_spec(job.environment)
    actor = make_actor(job, spec, (0, 1), (0, 0), threads=1)
    venv, seeds = make_vector_env(job.environment, 3, 0, 1)
    col = EnvCollector(job, actor, venv, seeds)
    frags = [col.collect()[0] for _ in range(n)]
    _fragment.actor = actor  # type: ignore[attr-defined]  # the policy that acted
    return job, spec, frags


def test_leaves_columns_and_features():
    import gymnasium as gym

    space = gym.spaces.Dict({"b": gym.spaces.Tuple((gym.spaces.Discrete(3),
                                                    gym.spaces.Box(0, 1, (2, 2)))),
                             "a": gym.spaces.MultiBinary(4)})
    leaves = obs_leaves(space)
    assert [leaf.column for leaf in leaves] == ["obs.a", "obs.b.0", "obs.b.1"]
    assert [leaf.kind for leaf in leaves] == ["binary", "discrete", "box"]
    raw = {"a": np.array([[1, 0, 1, 1]], np.int8), "b": (np.array([2]), np.ones((1, 2, 2)))}
    cols = split(raw, leaves)
    assert cols["obs.b.0"].dtype == np.int64 and cols["obs.b.1"].dtype == np.float32
    np.testing.assert_array_equal(features(cols, leaves),
                                  [[1, 0, 1, 1, 0, 0, 1, 1, 1, 1, 1]])
    with pytest.raises(ValueError, match="Text at obs.x is not supported"):
        obs_leaves(gym.spaces.Dict({"x": gym.spaces.Text(4)}))


def test_nested_fragment_round_trips_the_wire_and_is_checked_at_the_shard():
    job, spec, (frag,) = _fragment("cartpole_ppo.toml", NESTED)
    layout = job_layout(job, spec)
    assert layout.problem(frag) == ""
    assert frag["obs.image"].dtype == np.uint8 and frag["obs.pair.1"].dtype == np.int8
    msg = wire.decode(wire.encode(wire.Fragment(version=1, arrays=frag)))
    for k in frag:
        got = msg.arrays[k]
        assert got.dtype == frag[k].dtype and got.tobytes() == np.asarray(frag[k]).tobytes(), k
    assert layout.problem(msg.arrays) == ""
    good = {k: np.asarray(v) for k, v in frag.items()}
    bad = {
        "a key missing": {k: v for k, v in good.items() if k != "obs.pair.0"},
        "a dtype changed": {**good, "obs.x": good["obs.x"].astype(np.float64)},
        "a shape changed": {**good, "obs.image": good["obs.image"][..., :1]},
        "an index out of range": {**good, "obs.pair.0": good["obs.pair.0"] + 5},
        "a bit not 0 or 1": {**good, "obs.pair.1": good["obs.pair.1"] * 3},
        "a bootstrap key missing": {k: v for k, v in good.items()
                                    if k != "bootstrap_obs.image"},
        "a MultiBinary action of 2": {**good, "action": good["action"] * 2},
    }
    for what, arrays in bad.items():
        decoded = wire.decode(wire.encode(wire.Fragment(version=1, arrays=arrays)))
        assert layout.problem(decoded.arrays), what


def test_dict_observations_in_a_replay_snapshot_bit_for_bit(tmp_path):
    from verl_zmq.replay import snapshot
    from verl_zmq.replay.offpolicy import OffPolicyStore
    from verl_zmq.replay.store import RejectedFragment

    job, spec, frags = _fragment("cartpole_dqn.toml", ['environment.id="verl/GoalGrid-v0"',
                                                       "environment.kwargs={goal_index=true}"], 2)
    assert spec.structured and job.algorithm.name == "dqn"
    store = OffPolicyStore(job)
    for f in frags:
        store.insert(store.prepare(wire.Fragment(version=1, arrays=f)))
    assert {"obs.goal", "obs.position", "next_obs.goal"} <= set(store.storage.columns)
    path = snapshot.write(tmp_path, store.state())
    assert path.exists()
    again = OffPolicyStore(job)
    again.load_state(snapshot.read(tmp_path))
    for k, v in store.storage.columns.items():
        n = store.size
        assert again.storage.columns[k][:n].tobytes() == v[:n].tobytes(), k
    # a fragment whose leaf changed dtype does not mix with what is stored
    f = {k: np.asarray(v) for k, v in frags[0].items()}
    f["obs.goal"] = f["obs.goal"].astype(np.int32)
    f["bootstrap_obs.goal"] = f["bootstrap_obs.goal"].astype(np.int32)
    layout = job_layout(job, spec)
    assert "dtype" in layout.problem(f)
    with pytest.raises(RejectedFragment):
        again.insert(again.prepare(wire.Fragment(version=1, arrays={
            k: v for k, v in f.items() if k != "obs.goal"})))


@pytest.mark.parametrize("job_file,env,msg", [
    ("cartpole_dqn.toml", "verl/JointChoice-v0", "MultiDiscrete actions, which dqn does not "
                                                 "take (dapo, ppo do)"),
    ("pendulum_sac.toml", "CartPole-v1", "Discrete actions, which sac does not take"),
    ("cartpole_dqn.toml", "tests.envs:NestedObsEnv", "holds images beside other keys"),
])
def test_a_space_the_algorithm_does_not_take_is_one_line_before_anything_starts(
        job_file, env, msg):
    from verl_zmq.ops.checks import check_job

    kw = ['environment.kwargs={action="discrete"}'] if "Nested" in env else []
    job = load_job(CONFIGS / job_file, [f'environment.id="{env}"', *kw])
    problems = check_job(job, networks=False)
    assert problems and msg in problems[0] and "\n" not in problems[0]


def test_ppo_learns_on_every_leaf_kind_and_multibinary_actions():
    """One update on a nested fragment (an image encoded, indices one-hot, bits and
    a Box flattened; MultiBinary actions): the policy changes, the first epoch's
    ratio is 1."""
    from verl_zmq.algos import make_algorithm

    job, spec, frags = _fragment("cartpole_ppo.toml", NESTED + [
        "algorithm.params.n_epochs=1", "algorithm.params.minibatch_size=512",
        "algorithm.params.batch_size=512", "replay.capacity=2048"], 1)
    algo = make_algorithm(job, spec)
    algo.load_policy_arrays(_fragment.actor.policy_arrays())  # type: ignore[attr-defined]
    before = {k: v.copy() for k, v in algo.policy_arrays().items()}
    out = algo.learn(job_layout(job, spec).concat(frags)).metrics
    assert abs(out["losses/approx_kl"]) < 1e-6
    after = algo.policy_arrays()
    assert any(not np.allclose(before[k], after[k]) for k in before if "features" in k)


def test_the_space_jobs_differ_from_the_shipped_ppo_job_only_in_their_environment():
    import tomllib

    base = tomllib.loads((CONFIGS / "cartpole_ppo.toml").read_text())
    for name in ("goalgrid_ppo.toml", "jointchoice_ppo.toml"):
        job = tomllib.loads((CONFIGS / name).read_text())
        assert job["experiment"].pop("name") != base["experiment"]["name"]
        assert {k: v for k, v in job.items() if k != "environment"} == {
            k: (v if k != "experiment" else {x: y for x, y in v.items() if x != "name"})
            for k, v in base.items() if k != "environment"}
