"""Bounded memory under overload, short (`tools/soak.py --seconds 60`): samplers
that could outrun a slowed learner by about 10:1 are held back by backpressure,
and no role grows by more than 50 MB after warm-up."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.conftest import PY, ROOT


@pytest.mark.timeout(300)
def test_memory_stays_bounded_when_samplers_outrun_the_learner():
    r = subprocess.run([PY, str(ROOT / "tools" / "soak.py"), "--seconds", "60",
                        "--warmup", "20", "--max-growth-mb", "50"], cwd=ROOT,
                       capture_output=True, text=True, timeout=280)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    roles = [line.split()[0] for line in r.stdout.splitlines()
             if re.match(r"^(sampler|replay|learner|registry)", line)]
    assert {"learner-0", "replay-0", "registry"} <= set(roles) and len(roles) >= 7, r.stdout
    wait = float(re.search(r"wait fraction \(second half\): mean ([\d.]+)", r.stdout).group(1))
    assert wait > 0.3, r.stdout  # the samplers spend their time blocked: backpressure
    assert "roles died: none" in r.stdout
