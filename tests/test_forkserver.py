"""The fork server (verl_zmq/forkserver.py) on a live CartPole job: every local
role is forked from it; a role killed with -9 is reported with its signal and
restarted from the server; with the server itself killed, the roles it forked
keep running, the end of one of them is still noticed, and the launcher starts
it again as a plain process; stopping the job leaves no process behind."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.conftest import CONFIGS, kill_tree, read_events, start_job, wait_for

pytestmark = pytest.mark.e2e  # real processes

LIVENESS_S = 1.0 * 3  # heartbeat_interval_s x heartbeat_liveness


def _launcher(run, name):
    return [e for e in read_events(run / "logs" / "launcher.jsonl") if e.get("event") == name]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie waiting for its parent counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _restarted(run, member):
    return [e for e in _launcher(run, "role_restarted") if e["member"] == member]


@pytest.mark.timeout(300)
def test_forked_roles_report_their_signal_and_outlive_a_lost_server(tmp_path):
    run = tmp_path / "run"
    proc = start_job(CONFIGS / "cartpole_ppo.toml", run, "training.total_timesteps=10000000")
    try:
        servers = wait_for(lambda: len(_launcher(run, "fork_server_started")) == 2
                           and _launcher(run, "fork_server_started"), 60,
                           what="the fork server and the torch zygote")
        # `python -m launcher` (verl-launch) started both before it read the job
        assert sorted(e["torch"] for e in servers if e["early"]) == [False, True], servers
        server = next(e["pid"] for e in servers if not e["torch"])
        started = wait_for(lambda: len(_launcher(run, "role_started")) == 8
                           and _launcher(run, "role_started"), 60, what="every role")
        assert all(e["forked"] for e in started), started
        pids = {e["member"]: e["pid"] for e in started}
        with open(f"/proc/{pids['sampler-0']}/comm") as f:  # named for `top`: the member
            assert f.read().strip() == "sampler-0"
        wait_for(lambda: any(e.get("event") == "first_update"
                             for e in read_events(run / "logs" / "learner-0.jsonl")),
                 120, what="training")

        os.kill(pids["sampler-1"], signal.SIGKILL)
        again = wait_for(lambda: _restarted(run, "sampler-1"), 30, what="sampler-1 restarted")
        died = [e for e in _launcher(run, "role_died") if e["member"] == "sampler-1"]
        assert died[0]["exit_code"] == -signal.SIGKILL, died
        assert again[0]["forked"] is True
        pids["sampler-1"] = again[0]["pid"]

        os.kill(server, signal.SIGKILL)
        time.sleep(0.5)
        assert all(_alive(p) for p in pids.values())  # its roles run on without it
        os.kill(pids["sampler-2"], signal.SIGKILL)
        again = wait_for(lambda: _restarted(run, "sampler-2"), 30, what="sampler-2 restarted")
        assert again[0]["forked"] is False  # no server: its own interpreter
        pids["sampler-2"] = again[0]["pid"]
        wait_for(lambda: sum(e.get("event") == "sampling_started" for e in
                             read_events(run / "logs" / "sampler-2.jsonl")) >= 2, 60,
                 what="the new sampler-2 stepping")
        # nothing else died: a forked evaluator that blocked its event loop importing
        # torch for best.pt lost the registry and hit a libzmq assertion
        wait_for(lambda: any(e.get("event") == "evaluated" and e["env_steps"] >= 10_000
                             for e in read_events(run / "logs" / "evaluator-0.jsonl")),
                 120, what="evaluations after best.pt was first written")
        assert {e["member"] for e in _launcher(run, "role_died")} == {"sampler-1", "sampler-2"}
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    finally:
        kill_tree(proc)
    gone = wait_for(lambda: not any(_alive(p) for p in pids.values()), 30 + LIVENESS_S,
                    what="every role gone")
    assert gone


@pytest.mark.timeout(120)
def test_servers_started_ahead_are_reaped_when_no_job_takes_them(tmp_path, monkeypatch):
    """What `verl-launch` starts before reading the job: nothing for a dry run or
    Kubernetes; the torch zygote and the torch-free server otherwise, stopped and
    reaped (their empty error files removed) when the launch ends without taking
    them."""
    from launcher import early

    monkeypatch.setattr(early.tempfile, "tempdir", str(tmp_path))
    for argv in (["local", "job.toml", "--dry-run"], ["k8s", "job.toml"], ["--help"], []):
        early.start(argv)
        assert early.take() is None and early.take(torch=False) is None
    early.start(["local", "job.toml"])
    servers = dict(early._ahead)
    assert set(servers) == {True, False}
    assert all(s.proc.poll() is None for s in servers.values())
    early.close()
    assert all(s.proc.poll() is not None for s in servers.values()) and not early._ahead
    assert not list(tmp_path.glob("verl-forkserver-*"))



def test_the_zygote_of_a_hugging_face_job_preloads_its_model_type(tmp_path):
    """What a post-training job's roles import at their start (transformers'
    model module of the policy's type, from its inline config or its folder) is
    imported once in the zygote; an RL job's zygote imports torch's side only."""
    from launcher.forking import zygote_modules
    from verl_zmq.config import load_job

    inline = load_job(CONFIGS / "reverse_hf_grpo.toml")
    assert "transformers.models.llama.modeling_llama" in zygote_modules(inline)
    (tmp_path / "config.json").write_text('{"model_type": "gpt2"}')
    folder = load_job(CONFIGS / "reverse_hf_grpo.toml",
                      [f"algorithm.policy.path={tmp_path}", "algorithm.policy.config={}"])
    assert "transformers.models.gpt2.modeling_gpt2" in zygote_modules(folder)
    assert zygote_modules(load_job(CONFIGS / "cartpole_ppo.toml")) == ()


def test_every_role_preloads_what_it_imports():
    """What the fork servers run ahead of a job: it must not fail (a zygote that
    cannot preload is dropped, and every trainer then imports after its fork)."""
    from verl_zmq.config.roles import ROLES
    from verl_zmq.roles.base import role_class

    for role in ROLES:
        role_class(role).preload()
