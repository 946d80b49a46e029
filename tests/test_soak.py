"""Bounded memory under overload, short (`tools/faults/soak.py --seconds 20`): once the
replay shard is full (the learner is slowed on purpose; measuring starts then,
so the overload is certain however fast each process runs), the shard stops
reading and the samplers block on sending, both counted, and no role grows by
more than 50 MB after warm-up. Nothing here depends on how much faster the
samplers are than the learner."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.conftest import PY, ROOT

pytestmark = pytest.mark.e2e  # real processes


@pytest.mark.timeout(300)
def test_memory_stays_bounded_when_samplers_outrun_the_learner():
    r = subprocess.run([PY, str(ROOT / "tools" / "faults" / "soak.py"), "--seconds", "20",
                        "--warmup", "5", "--max-growth-mb", "50"], cwd=ROOT,
                       capture_output=True, text=True, timeout=280)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    roles = [line.split()[0] for line in r.stdout.splitlines()
             if re.match(r"^(sampler|replay|learner|registry)", line)]
    assert {"learner-0", "replay-0", "registry"} <= set(roles) and len(roles) >= 7, r.stdout
    m = re.search(r"shard full: yes; after it: shard not reading ([\d.]+) s, samplers "
                  r"blocked sending ([\d.]+) s", r.stdout)
    assert m, r.stdout
    assert float(m.group(1)) > 0 and float(m.group(2)) > 0, r.stdout  # backpressure, counted
    assert "roles died: none" in r.stdout
