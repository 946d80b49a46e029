"""A full disk under a running job: every role keeps going without its log, no
checkpoint is half-written, the error is said on stderr with its path, and a
SIGTERM still stops the launcher within its grace period (its own log being
unwritable), with the summary on stdout where summary.json cannot be written."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import subprocess
import time

import pytest
import torch

from tests.conftest import CONFIGS, kill_tree, start_job, wait_for
from verl_zmq.config import load_job

pytestmark = pytest.mark.e2e  # real processes


@contextlib.contextmanager
def small_disk(path, size: str = "4m"):
    path.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"a small tmpfs cannot be mounted here ({r.stderr.strip() or r.returncode}): "
                    f"this test needs root, as CI has")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(path) -> int:
    """Write until the filesystem is full; the bytes written (0 where the job had
    already filled it: then even the filler cannot be created)."""
    n = 0
    try:
        with open(path / "filler", "wb", buffering=0) as f:
            while True:
                f.write(b"\0" * 65536)
                n += 65536
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
    return n


@pytest.mark.timeout(300)
def test_a_full_disk_is_said_and_sigterm_still_stops_the_launcher(tmp_path):
    L = load_job(CONFIGS / "cartpole_ppo.toml").launch
    with small_disk(tmp_path / "disk") as disk:
        run = disk / "run"
        proc = start_job(CONFIGS / "cartpole_ppo.toml", run, "training.total_timesteps=10000000",
                         "checkpoint.interval_steps=2048", "checkpoint.min_free_mb=0",
                         "evaluation.interval_steps=4096")
        try:
            wait_for(lambda: list((run / "checkpoints").glob("step_*.pt")), 180,
                     what="a first checkpoint")
            fill(disk)
            time.sleep(2 * L.heartbeat_interval_s)  # the roles write on: into a full disk
            assert proc.poll() is None  # nothing died of it
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=L.grace_s + 20)
        finally:
            kill_tree(proc)
        assert proc.returncode == 130, err[-2000:]
        said = [line for line in err.splitlines() if "ENOSPC" in line]
        assert said and str(run) in said[0], err[-2000:]
        summary = json.loads(out[out.index("{"):]) if not (run / "summary.json").exists() \
            else json.loads((run / "summary.json").read_text())
        assert summary["status"] == "interrupted"
        for ckpt in (run / "checkpoints").glob("*.pt"):  # every one whole, none half-written
            torch.load(ckpt, weights_only=True)
        os.unlink(disk / "filler")


def test_two_writes_of_one_checkpoint_at_once_both_succeed(tmp_path):
    """A periodic snapshot and a stopping trainer's checkpoint write latest.pt from
    two threads of one process: each renames its own temporary (a shared name made
    one of them fail with ENOENT), and the file is one of the two, whole."""
    from concurrent.futures import ThreadPoolExecutor

    from verl_zmq.checkpoint import save_atomic

    path = tmp_path / "latest.pt"
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda i: save_atomic({"i": torch.tensor(i % 2)}, path), range(64)))
    assert int(torch.load(path, weights_only=True)["i"]) in (0, 1)
    assert [p.name for p in tmp_path.iterdir()] == ["latest.pt"]


def test_a_checkpoint_write_on_a_full_disk_is_an_oserror_and_keeps_the_old_file(tmp_path):
    """torch's writer reports a full disk as a RuntimeError: the learner, the
    evaluator's best.pt and every snapshot expect an OSError (said, then go on),
    so save_atomic gives one, with no temporary left and the old file whole."""
    from verl_zmq.checkpoint import save_atomic

    with small_disk(tmp_path / "disk") as disk:
        path = disk / "latest.pt"
        save_atomic({"x": torch.zeros(1000)}, path)
        with pytest.raises(OSError) as e:
            save_atomic({"x": torch.zeros(4_000_000)}, path)  # 16 MB on a small tmpfs
        assert e.value.errno == errno.ENOSPC, e.value
        assert sorted(p.name for p in disk.iterdir()) == ["latest.pt"]
        assert torch.load(path, weights_only=True)["x"].shape == (1000,)
