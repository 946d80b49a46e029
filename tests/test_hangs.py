"""No exchange of the main job can hang in silence: its replay shard, its learner
and its registry are each stopped (SIGSTOP) in turn while it trains; each side
that waits on them logs it within the deadline the job derives (`comm/stalls.py`:
`exchange_stalled`; the membership client: `registry_lost`), and once let go
(SIGCONT) the wait ends. `tools/faults/hangs.py --all` adds the DAPO gossip, two
data-parallel learners and `verl serve`."""

from __future__ import annotations

import pytest

from tools.faults.hangs import main_job

pytestmark = pytest.mark.e2e  # real processes

SLACK_S = 60.0  # a loaded machine may be late to run a timer: a bound, not a pace


@pytest.mark.timeout(900)
def test_every_wait_on_a_stopped_member_is_said_within_its_deadline_and_ends(tmp_path):
    rows = main_job(tmp_path)
    assert {(s.stopped, s.exchange) for s in rows} == {
        ("replay-0", "fragments"), ("replay-0", "requests"), ("learner-0", "sampler_params"),
        ("registry", "registry")}
    for s in rows:
        assert s.said_after_s is not None, f"{s.waiter} said nothing of {s.stopped} ({s.exchange})"
        assert s.deadline_s is not None and s.deadline_s > 0
        # the line came after the stop, within the wait's deadline (the wait may have
        # begun after the stop: a sampler still collecting when its shard stopped)
        assert 0 < s.said_after_s <= s.deadline_s + SLACK_S, s
        assert s.ended_after_s is not None, f"{s.waiter}'s wait on {s.stopped} never ended"
