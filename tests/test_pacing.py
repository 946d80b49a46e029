"""Pacing a sampler to its learner's consumption (sampling.lead_updates)."""

from __future__ import annotations

from tests.conftest import CONFIGS
from verl_zmq.config import load_job
from verl_zmq.sampling.pacing import Pacer, make_pacer


def _ship_all(p: Pacer) -> int:
    n = 0
    while p.may_ship():
        p.shipped_one()
        n += 1
    return n


def test_a_sampler_ships_its_share_of_each_update_plus_its_lead():
    p = Pacer(share=1.0, lead=1)  # 4 samplers, 4 fragments a batch
    assert _ship_all(p) == 1  # before any params: the lead only
    p.heard(0)  # first params: counting starts here
    assert _ship_all(p) == 1
    p.heard(3)  # three updates later: three more shares
    assert _ship_all(p) == 3
    p.heard(3)  # a re-publish of the same version adds nothing
    assert _ship_all(p) == 0
    p.heard(1)  # the learner restarted behind: count afresh
    assert p.base == 1 and _ship_all(p) == 1


def _lags(lead: int, updates: int = 6) -> list[int]:
    """One sampler (a whole batch per update) and a learner that trains as soon as a
    batch is there: the policy lag of the batch each update trains on."""
    p, queue, lags = Pacer(share=1.0, lead=lead), [], []
    p.heard(0)
    for version in range(updates):
        while p.may_ship():  # collected with the params heard last
            p.shipped_one()
            queue.append(version)
        lags.append(version - queue.pop(0))  # this update's batch
        p.heard(version + 1)  # the update ends; meanwhile the sampler shipped nothing more
    return lags


def test_lead_one_takes_turns_with_fresh_batches_and_lead_two_overlaps_one_behind():
    assert _lags(1) == [0] * 6  # sampling and learning alternate
    assert _lags(2) == [0] + [1] * 5  # the next batch is collected during this update


def test_lost_fragments_are_forgiven_and_a_shard_change_counts_afresh():
    p = Pacer(share=1.0, lead=1)
    p.heard(5)
    assert _ship_all(p) == 1
    p.shipped_one(forgiven=True)  # shipped on a timeout: stands in for a lost one
    p.heard(6)
    assert _ship_all(p) == 1  # the budget is as if the lost fragment had arrived
    p.reset()  # a shard left with what it held
    assert _ship_all(p) == 1  # the lead again, counted from the next version heard
    p.heard(6)
    assert p.base == 6


def test_fractional_shares_add_up():
    p = Pacer(share=0.5, lead=2)  # 8 samplers share a batch of 4 fragments
    p.heard(10)
    assert _ship_all(p) == 1
    p.heard(14)
    assert _ship_all(p) == 2


def test_the_job_decides_whether_samplers_are_paced():
    job = load_job(CONFIGS / "cartpole_ppo.toml", ["sampling.lead_updates=1"])
    p = make_pacer(job)  # batch 256 / fragments of 32 x 2 = 4 per update, 4 samplers
    assert p is not None and p.share == 1.0 and p.lead == 1
    assert make_pacer(load_job(CONFIGS / "cartpole_ppo.toml")) is not None  # the default
    assert make_pacer(load_job(CONFIGS / "cartpole_ppo.toml",
                               ["sampling.lead_updates=0"])) is None
    # dynamic sampling may drop fragments: the learner would wait for more than a share
    assert make_pacer(load_job(CONFIGS / "cartpole_dapo.toml")) is not None
    assert make_pacer(load_job(CONFIGS / "cartpole_dapo.toml",
                               ["algorithm.params.dynamic_sampling=true"])) is None
    assert make_pacer(load_job(CONFIGS / "cartpole_ppo.toml", [
        "sampling.lead_updates=1", 'sampling.mode="sync"'])) is None
    assert make_pacer(load_job(CONFIGS / "cartpole_dqn.toml",
                               ["sampling.lead_updates=1"])) is None  # off-policy


def test_a_peers_mix_moves_the_version_but_not_the_updates_samplers_pace_on(tmp_path):
    """A gossip peer that mixes in parameters publishes a new version without
    having consumed a batch: pacing on versions would let its samplers ship a
    share for every mix, a backlog that only grows (and is dropped for lag)."""
    import structlog

    from verl_zmq import wire
    from verl_zmq.envs.make import env_spec
    from verl_zmq.learning.trainer import Trainer

    job = load_job(CONFIGS / "cartpole_dapo.toml")
    t = Trainer(job, env_spec(job.environment), tmp_path, structlog.get_logger())
    before = wire.decode(wire.encode(t.params()))
    t.load_arrays(t.arrays())  # a mix
    after = wire.decode(wire.encode(t.params()))
    assert after.version == before.version + 1 and after.updates == before.updates
    p = Pacer(share=2.0, lead=1)
    p.heard(before.updates)
    assert _ship_all(p) == 2
    p.heard(after.updates)
    assert _ship_all(p) == 0  # no update, no new share


def test_a_lost_samplers_share_goes_to_the_others_and_back():
    p = Pacer(share=1.0, lead=1)  # 4 samplers, 4 fragments a batch
    p.heard(10)
    p.shipped_one()
    assert not p.may_ship()
    p.share_among(4, 2)  # two samplers lost with their host: a share of 2, counted afresh
    p.heard(11)
    assert p.may_ship()
    p.shipped_one()
    assert p.may_ship()
    p.shipped_one()
    assert not p.may_ship()
    p.share_among(4, 4)  # they are back: a share of 1, counted afresh
    p.heard(12)
    p.shipped_one()
    assert not p.may_ship()
    p.share_among(4, 4)  # no change: the count stands
    assert not p.may_ship()


def test_many_samplers_take_turns_a_batch_at_every_update():
    """16 samplers sharing batches of 2 fragments: at every update the group may
    ship exactly 2 more, each sampler in its turn, never all 16 at once."""
    n, per_batch = 16, 2.0
    pacers = [Pacer(share=per_batch / n, lead=1) for _ in range(n)]
    for i, p in enumerate(pacers):
        p.share_among(per_batch, n, i)
        p.heard(0)
    turns: list[set[int]] = []
    for update in range(24):
        shipped = {i for i, p in enumerate(pacers) if _ship_all(p)}
        assert len(shipped) == 2, (update, shipped)
        turns.append(shipped)
        for p in pacers:
            p.heard(update + 1)
    # every sampler had its turns, one every 8 updates
    assert all(sum(i in t for t in turns) == 3 for i in range(n))


def test_uneven_shares_still_sum_to_the_batch():
    for n, per_batch in ((3, 2.0), (6, 3.0), (5, 4.0), (7, 3.0)):
        pacers = [Pacer(share=per_batch / n, lead=2) for _ in range(n)]
        for i, p in enumerate(pacers):
            p.share_among(per_batch, n, i)
            p.heard(0)
        total = sum(_ship_all(p) for p in pacers)
        assert total == 2 * per_batch, (n, per_batch)  # the lead's two batches
        for update in range(1, 13):
            for p in pacers:
                p.heard(update)
            assert sum(_ship_all(p) for p in pacers) == per_batch, (n, per_batch, update)


def test_many_samplers_keep_fragments_under_way_within_the_lag_limit():
    """16 samplers, batches of 2 fragments, the learner's lag limit 4: each sampler
    is allowed ahead up to 4 updates (fragments trained on at lag 3 at most), so 8
    fragments are under way at once instead of 2, then 2 more at every update."""
    n, per_batch = 16, 2.0
    pacers = [Pacer(share=per_batch / n, lead=1, max_lead=4) for _ in range(n)]
    for i, p in enumerate(pacers):
        p.share_among(per_batch, n, i)
        p.heard(0)
    assert pacers[0].lead_now == 4
    assert sum(_ship_all(p) for p in pacers) == 4 * per_batch
    for update in range(1, 20):
        for p in pacers:
            p.heard(update)
        assert sum(_ship_all(p) for p in pacers) == per_batch
    assert Pacer(share=1.0, lead=1, max_lead=4).lead_now == 1  # a whole share: as set
