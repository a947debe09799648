"""Quotas: the pure decisions, and counting in Redis (fakeredis)."""

from __future__ import annotations

import fakeredis
import pytest

from shared.access.quotas import (
    QuotaCounter,
    Quotas,
    over_rate,
    over_revisions,
    over_unfinished,
    seconds_left,
    user,
)
from shared.errors import QuotaExceeded, TooManyRequests
from shared.store.tasks import TaskStore
from shared.task import states

SMALL = Quotas(creates_per_minute=3, unfinished_tasks=2, revisions_per_task=4)


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_each_refusal_names_its_rule_and_limit() -> None:
    assert over_rate(SMALL, "user:ann", 3) is None
    rate = over_rate(SMALL, "user:ann", 4)
    assert rate is not None and (rate.rule, rate.limit) == ("quota.creates_per_minute", 3)
    assert over_unfinished(SMALL, "user:ann", 1) is None
    count = over_unfinished(SMALL, "user:ann", 2)
    assert count is not None and (count.rule, count.limit) == ("quota.unfinished_tasks", 2)
    assert over_revisions(SMALL, "t1", 3) is None
    revs = over_revisions(SMALL, "t1", 4)
    assert revs is not None and (revs.rule, revs.limit) == ("quota.revisions_per_task", 4)
    assert "user:ann" in count.message and "t1" in revs.message


def test_a_quota_of_zero_is_no_limit() -> None:
    off = Quotas(0, 0, 0)
    assert over_rate(off, "s", 10**6) is None
    assert over_unfinished(off, "s", 10**6) is None
    assert over_revisions(off, "t", 10**6) is None


def test_retry_after_is_what_is_left_of_the_minute() -> None:
    assert seconds_left(120.0) == 60
    assert seconds_left(179.2) == 1
    assert seconds_left(150.5) == 30


def task(owner: str, state: str = states.PENDING) -> dict[str, object]:
    return {"name": "t", "owner": owner, "state": state, "revision": 1, "steps": [["true"]],
            "env": [], "created_at": 0.0, "updated_at": 0.0}


def create(counter: QuotaCounter, owner: str) -> bool:
    """A task of ``owner`` stored with its quotas counted, as the API stores one."""
    _, created = TaskStore(counter.r).create(task(owner), budget=counter.budget(owner))
    return created


def test_creations_past_the_rate_in_one_minute_are_told_when_to_retry(
        redis_client: fakeredis.FakeRedis) -> None:
    counter = QuotaCounter(redis_client, quotas=Quotas(3, 0, 0), clock=Clock(600.0 + 45))
    for _ in range(3):
        assert create(counter, "ann")
    with pytest.raises(TooManyRequests) as refused:
        create(counter, "ann")
    assert refused.value.retry_after == 15
    assert [p.rule for p in refused.value.problems] == ["quota.creates_per_minute"]
    assert len(TaskStore(redis_client).all_ids()) == 3  # the refused one stored nothing
    assert create(counter, "bob")  # another user's budget is their own


def test_the_next_minute_starts_a_new_count(redis_client: fakeredis.FakeRedis) -> None:
    clock = Clock(600.0)
    counter = QuotaCounter(redis_client, quotas=Quotas(1, 0, 0), clock=clock)
    create(counter, "ann")
    clock.now = 660.0
    create(counter, "ann")
    assert 0 < redis_client.ttl(counter.keys.quota_creates(user("ann"), 11)) <= 120


def test_unfinished_tasks_are_counted_per_owner_from_the_state_indexes(
        redis_client: fakeredis.FakeRedis) -> None:
    tasks = TaskStore(redis_client)
    tasks.load_many([task("ann"), task("ann", states.RUNNING), task("ann", states.SUCCEEDED),
                     task("ann", states.REJECTED), task("bob")])
    counter = QuotaCounter(redis_client, quotas=Quotas(0, 2, 0))
    assert counter.unfinished("ann") == 2
    with pytest.raises(QuotaExceeded) as refused:
        create(counter, "ann")
    assert refused.value.problems[0].limit == 2
    assert counter.unfinished("ann") == 2
    assert create(counter, "bob")


@pytest.mark.parametrize("limit", [1, 2, 5])
def test_the_script_refuses_exactly_where_the_pure_rules_do(
        redis_client: fakeredis.FakeRedis, limit: int) -> None:
    rate, unfinished = QuotaCounter(redis_client, "r", Quotas(limit, 0, 0)),\
        QuotaCounter(redis_client, "u", Quotas(0, limit, 0))
    for counter, rule in ((rate, over_rate), (unfinished, over_unfinished)):
        stored = 0
        for attempt in range(1, limit + 3):
            count = attempt if counter is rate else stored
            refused = rule(counter.quotas, user("ann"), count) is not None
            try:
                TaskStore(redis_client, counter.keys.prefix).create(
                    task("ann"), budget=counter.budget("ann"))
                stored += 1
                assert not refused, (rule.__name__, attempt)
            except (TooManyRequests, QuotaExceeded):
                assert refused, (rule.__name__, attempt)
        assert stored == limit


def test_a_replayed_creation_is_not_counted_again(redis_client: fakeredis.FakeRedis) -> None:
    counter = QuotaCounter(redis_client, quotas=Quotas(1, 0, 0), clock=Clock(600.0))
    tasks = TaskStore(redis_client)
    first, _ = tasks.create(task("ann"), "key-1", budget=counter.budget("ann"))
    again, created = tasks.create(task("ann"), "key-1", budget=counter.budget("ann"))
    assert (again["id"], created) == (first["id"], False)
    assert redis_client.get(counter.keys.quota_creates(user("ann"), 10)) == "1"


def test_a_new_revision_past_the_limit_is_refused(redis_client: fakeredis.FakeRedis) -> None:
    counter = QuotaCounter(redis_client, quotas=Quotas(0, 0, 4))
    counter.check_revision({**task("ann"), "id": "t1", "revision": 3})
    with pytest.raises(QuotaExceeded) as refused:
        counter.check_revision({**task("ann"), "id": "t1", "revision": 4})
    assert refused.value.problems[0].rule == "quota.revisions_per_task"


def test_reopening_a_finished_task_counts_against_the_unfinished_quota(
        redis_client: fakeredis.FakeRedis) -> None:
    TaskStore(redis_client).load_many([task("ann")])
    counter = QuotaCounter(redis_client, quotas=Quotas(0, 1, 0))
    counter.check_revision({**task("ann"), "id": "t1"})  # unfinished already: no change
    with pytest.raises(QuotaExceeded):
        counter.check_revision({**task("ann", states.SUCCEEDED), "id": "t2"})
