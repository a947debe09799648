"""Task uids: a host uid of its own for every live task, never one for two of them."""

from __future__ import annotations

import fakeredis
import pytest

from shared.errors import TransientError
from shared.store.uids import TaskUids, UidsExhausted

LEASE = 10.0
FIRST = 1_900_000_000


def pool(count: int = 3, client: fakeredis.FakeRedis | None = None) -> TaskUids:
    return TaskUids(client or fakeredis.FakeRedis(), "t", FIRST, count, LEASE)


def test_two_live_tasks_never_get_one_uid() -> None:
    uids = pool(count=3)
    got = [uids.acquire(task, 1, 0) for task in ("a", "b", "c")]
    assert sorted(got) == [FIRST, FIRST + 1, FIRST + 2]
    assert uids.acquire("a", 2, 0) is None  # a task's next revision is another live task
    assert uids.held("a", 1) == got[0] and uids.held("a", 2) is None


def test_asking_again_keeps_the_same_uid_and_extends_its_lease() -> None:
    uids = pool(count=2)
    uid = uids.acquire("a", 1, 0)
    assert uids.acquire("a", 1, 8) == uid  # a redelivered launch
    assert uids.acquire("b", 1, 15) is not None  # a's lease runs to 18 now, not 10
    assert uids.acquire("c", 1, 15) is None and uids.held("a", 1) == uid


def test_a_released_uid_comes_back() -> None:
    uids = pool(count=1)
    uid = uids.acquire("a", 1, 0)
    assert uids.acquire("b", 1, 0) is None
    uids.release("a", 1)
    uids.release("a", 1)  # twice: nothing more given back
    assert uids.acquire("b", 1, 1) == uid
    assert uids.acquire("c", 1, 1) is None


def test_released_uids_are_reused_oldest_first_after_the_fresh_ones() -> None:
    uids = pool(count=4)
    a, b = uids.acquire("a", 1, 0), uids.acquire("b", 1, 0)
    uids.release("b", 1)
    uids.release("a", 1)
    assert [uids.acquire(t, 1, 1) for t in ("c", "d", "e", "f")] == [FIRST + 2, FIRST + 3, b, a]


def test_a_lapsed_lease_s_uid_is_recovered() -> None:
    uids = pool(count=1)
    uid = uids.acquire("a", 1, 0)
    assert uids.renew("a", 1, 5) == uid  # the runner's heartbeat: lease to 15
    assert uids.acquire("b", 1, 14) is None
    assert uids.acquire("b", 1, 16) == uid  # a's runner stopped renewing: gone
    assert uids.held("a", 1) is None
    assert uids.renew("a", 1, 17) is None  # a late renewal never takes it back


def test_a_lapsed_lease_nobody_needed_is_still_its_holder_s() -> None:
    uids = pool(count=2)
    uid = uids.acquire("a", 1, 0)
    assert uids.renew("a", 1, 30) == uid  # Redis was away a while; nobody took it


def test_a_release_after_the_uid_went_to_another_task_takes_nothing_from_it() -> None:
    uids = pool(count=1)
    uid = uids.acquire("a", 1, 0)
    assert uids.acquire("b", 1, 20) == uid  # a's lease lapsed
    uids.release("a", 1)  # a's runner, late
    assert uids.held("b", 1) == uid and uids.acquire("c", 1, 21) is None


def test_exhaustion_is_a_wait_never_a_shared_uid() -> None:
    uids = pool(count=2)
    uids.acquire("a", 1, 0)
    uids.acquire("b", 1, 0)
    with pytest.raises(UidsExhausted) as raised:
        uids.take("c", 1, 0)
    assert isinstance(raised.value, TransientError)  # the launch is retried, later
    assert "2" in raised.value.message and "TASKENV_TASK_UID_COUNT" in raised.value.message


def test_a_smaller_range_never_gives_out_what_it_no_longer_holds() -> None:
    client = fakeredis.FakeRedis()
    wide = pool(count=3, client=client)
    for task in ("a", "b", "c"):
        wide.acquire(task, 1, 0)
    wide.release("c", 1)  # FIRST + 2 goes back to the free list
    narrow = pool(count=2, client=client)
    assert narrow.acquire("d", 1, 1) is None  # FIRST + 2 is out of range now
    narrow.release("a", 1)
    assert narrow.acquire("d", 1, 1) == FIRST


def test_many_racing_acquirers_get_distinct_uids() -> None:
    client = fakeredis.FakeRedis()
    pools = [pool(count=50, client=client) for _ in range(5)]
    got = [pools[i % 5].acquire(f"t{i}", 1, 0) for i in range(60)]
    given = [uid for uid in got if uid is not None]
    assert len(given) == 50 and len(set(given)) == 50
