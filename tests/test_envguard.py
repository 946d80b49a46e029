"""Hung and crashing environments: with `environment.step_timeout_s` a sampler's
envs run in worker processes; a step past the timeout (or one that raises) gets
them killed and made anew, the episodes dropped and counted, and the sampler's
heartbeat never missed; an env that keeps failing makes the sampler give up with
a clear error, and the launcher's restart policy takes over."""

from __future__ import annotations

import json
import signal

import numpy as np
import pytest

from tests.conftest import CONFIGS, kill_tree, read_events, start_job, wait_for

FAULTY = 'environment.id="tests.envs:FaultyCartPole"'


def test_guarded_env_recovers_from_hangs_and_gives_up_on_repeated_errors():
    from verl_zmq.config import load_job
    from verl_zmq.envs.guard import EnvFailed, GuardedVectorEnv
    from verl_zmq.envs.make import make_env

    job = load_job(CONFIGS / "cartpole_ppo.toml", [FAULTY, "environment.kwargs={hang_every = 60}",
                                                   "environment.step_timeout_s=0.5"])
    g = GuardedVectorEnv(job.environment, 2, [1, 2], make_env)
    g.reset()
    dropped = 0
    try:
        for _ in range(200):  # each worker hangs at its 60th, 120th, ... step
            obs, r, te, tr, info = g.step(np.zeros(2, np.int64))
            assert obs.shape == (2, 4)
            dropped += "dropped" in info
    finally:
        g.close()
    assert g.failures == dropped >= 2 and g.dropped_episodes == 2 * dropped
    assert "step_timeout_s" in g.last_error
    job = load_job(CONFIGS / "cartpole_ppo.toml", [FAULTY, "environment.kwargs={raise_every = 5}",
                                                   "environment.step_timeout_s=0.5",
                                                   "environment.max_env_failures=3"])
    g = GuardedVectorEnv(job.environment, 2, [1, 2], make_env)
    g.reset()
    with pytest.raises(EnvFailed, match="failed 3 times .*injected fault"):
        for _ in range(100):
            g.step(np.zeros(2, np.int64))


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_a_sampler_with_hanging_envs_keeps_its_heartbeat_and_keeps_training(tmp_path):
    run = tmp_path / "run"
    proc = start_job(CONFIGS / "cartpole_ppo.toml", run, FAULTY, "sampling.num_workers=1",
                     "sampling.max_fragments_ahead=0", "sampling.lead_updates=0",  # never wait
                     "environment.kwargs={hang_every = 400}", "environment.step_timeout_s=1.0",
                     "launch.evaluators=0", "logging.interval_s=1.0",
                     "training.total_timesteps=6000")
    try:
        _, err = proc.communicate(timeout=280)
    finally:
        kill_tree(proc)
    assert proc.returncode == 0, err[-2000:]
    sampler = [e for e in read_events(run / "logs" / "sampler-0.jsonl")
               if e.get("event") == "metrics"]
    assert sampler[-1]["sampler/env_failures"] >= 2, sampler[-1]
    assert sampler[-1]["sampler/episodes_dropped"] >= 4
    # the heartbeat never lapsed: the registry never dropped the sampler
    left = [e for e in read_events(run / "logs" / "registry.jsonl")
            if e.get("event") == "member_left" and e.get("member") == "sampler-0"
            and e.get("reason") != "deregistered"]
    assert not left, left
    summary = json.loads((run / "summary.json").read_text())
    assert summary["env_steps"] >= 6000 and not summary["restarts"]


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_a_sampler_whose_env_keeps_failing_gives_up_clearly(tmp_path):
    run = tmp_path / "run"
    proc = start_job(CONFIGS / "cartpole_ppo.toml", run, FAULTY, "sampling.num_workers=1",
                     "sampling.max_fragments_ahead=0", "sampling.lead_updates=0",
                     "environment.kwargs={raise_every = 50}", "environment.step_timeout_s=1.0",
                     "environment.max_env_failures=3", "launch.evaluators=0",
                     "launch.max_restarts_per_role={sampler = 1}", "launch.restart_backoff_s=0.2")
    try:
        wait_for(lambda: [e for e in read_events(run / "logs" / "launcher.jsonl")
                          if e.get("event") == "role_failed"], 200, what="the sampler giving up")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        kill_tree(proc)
    summary = json.loads((run / "summary.json").read_text())
    msg = summary["failed_roles"]["sampler-0"]
    assert "failed 3 times (environment.max_env_failures = 3)" in msg, msg
    assert "injected fault" in msg
    restarted = [e for e in read_events(run / "logs" / "launcher.jsonl")
                 if e.get("event") == "role_restarted" and e.get("member") == "sampler-0"]
    assert restarted  # the restart policy took over first
