"""`verl_zmq.train` in a real Jupyter kernel (a running event loop in the main
thread), twice in one kernel, then `load_policy`; and from a thread."""

from __future__ import annotations

import threading

import pytest

import verl_zmq
from tests.conftest import CONFIGS, ROOT, free_port_range

pytestmark = pytest.mark.e2e


def _overrides(lo: int, hi: int) -> dict:
    return {"launch.port_range": [lo, hi], "training.total_timesteps": 3000,
            "sampling.num_workers": 2, "evaluation.interval_steps": 1000,
            "launch.standby": []}


@pytest.mark.timeout(300)
def test_train_twice_in_a_jupyter_kernel_then_load_the_policy(tmp_path):
    import nbformat
    from nbclient import NotebookClient

    lo, hi = free_port_range()
    over = _overrides(lo, hi)
    code = [
        f"import sys; sys.path.insert(0, {str(ROOT)!r})\nimport verl_zmq, numpy as np",
        f"a = verl_zmq.train({str(CONFIGS / 'cartpole_ppo.toml')!r}, overrides={over!r}, "
        f"run_dir={str(tmp_path / 'a')!r})\nprint('first', a.status, a.exit_code)",
        f"b = verl_zmq.train({str(CONFIGS / 'cartpole_ppo.toml')!r}, overrides={over!r}, "
        f"run_dir={str(tmp_path / 'b')!r})\nprint('second', b.status, b.exit_code)",
        "p = verl_zmq.load_policy(b.best_checkpoint)\n"
        "print('action', int(p.act(np.zeros(4, np.float32))))",
    ]
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in code]
    NotebookClient(nb, timeout=240, kernel_name="python3", resources={
        "metadata": {"path": str(tmp_path)}}).execute()
    out = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", [])
                  if o.get("name") == "stdout")
    assert "first done 0" in out and "second done 0" in out, out
    assert "action 0" in out or "action 1" in out, out


@pytest.mark.timeout(200)
def test_train_from_a_thread(tmp_path):
    lo, hi = free_port_range()
    box: dict = {}

    def go():
        box["run"] = verl_zmq.train(CONFIGS / "cartpole_ppo.toml", overrides=_overrides(lo, hi),
                                    run_dir=tmp_path / "t")

    t = threading.Thread(target=go)
    t.start()
    t.join(180)
    assert box["run"].status == "done", box
