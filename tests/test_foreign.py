"""An open wire: a sampler written without verl_zmq (tools/foreign_sampler.py,
from the README's specification) joins a CartPole PPO job beside one of ours;
the job reaches its target and the learner counts fragments from both."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.conftest import CONFIGS, PY, ROOT, kill_tree, read_events, start_job, wait_for

# a return a random CartPole policy never reaches (about 20): the job learns with
# the foreign sampler in it; reaching 475 is the main job's own test
TARGET = 300.0


def test_foreign_sampler_imports_no_verl_zmq():
    src = (ROOT / "tools" / "foreign_sampler.py").read_text()
    imports = [x.split()[1].split(".")[0] for x in src.splitlines()
               if x.startswith(("import ", "from "))]
    assert "verl_zmq" not in imports and "torch" not in imports
    assert {"zmq", "msgpack", "numpy", "gymnasium"} <= set(imports)


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_job_with_a_foreign_sampler_reaches_its_target(tmp_path):
    run = tmp_path / "run"
    job = start_job(CONFIGS / "cartpole_ppo.toml", run, "sampling.num_workers=1",
                    f"evaluation.stop_at_return={TARGET}")
    foreign = None
    try:
        wait_for(lambda: all((run / f).exists() for f in ("plan.json", "job.toml", "keys.json")),
                 60,
                 what="the run folder")
        registry = json.loads((run / "plan.json").read_text())["registry"]
        with open(tmp_path / "foreign.jsonl", "w") as out:
            foreign = subprocess.Popen(
                [PY, str(ROOT / "tools" / "foreign_sampler.py"), "--job", str(run / "job.toml"),
                 "--registry", registry, "--id", "sampler-foreign",
                 "--keys", str(run / "keys.json")],
                cwd=ROOT, stdout=out, stderr=subprocess.PIPE, text=True,
                start_new_session=True)
        _, err = job.communicate(timeout=500)
        foreign.wait(30)
    finally:
        kill_tree(job)
        if foreign is not None:
            kill_tree(foreign)
    assert job.returncode == 0, err[-2000:]
    summary = json.loads((run / "summary.json").read_text())
    learner = read_events(run / "logs" / "learner-0.jsonl")
    # on a miss: every evaluation and what the learner was doing at the end
    tail = [e for e in learner if e.get("event") in ("metrics", "training_finished")][-3:]
    assert summary["best_eval_return"] >= TARGET, (summary["evaluations"], tail)
    fev = read_events(tmp_path / "foreign.jsonl")
    assert any(e["event"] == "registered" for e in fev)
    assert any(e["event"] == "stopped" and e["sent"] > 0 for e in fev)
    froms = [e["learner/fragments_from"] for e in learner
             if e.get("event") == "metrics" and "learner/fragments_from" in e]
    assert froms and {"sampler-0", "sampler-foreign"} <= set(froms[-1]), froms[-1:]
    assert froms[-1]["sampler-foreign"] > 0 and froms[-1]["sampler-0"] > 0
    assert max(e.get("learner/fragments_rejected", 0) for e in learner) == 0
