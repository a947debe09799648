"""Task uids: a host uid of its own for every live task, never one for two of them."""

from __future__ import annotations

import shutil
from pathlib import Path

import fakeredis
import pytest

from shared.errors import TransientError
from shared.store.uids import TaskUids, UidsExhausted
from workers.launchers.common.containment.uids import ClaimedUids, NoFreeUid

LEASE = 10.0
FIRST = 1_900_000_000


def pool(count: int = 3, client: fakeredis.FakeRedis | None = None) -> TaskUids:
    return TaskUids(client or fakeredis.FakeRedis(), "t", FIRST, count, LEASE)


def test_two_live_tasks_never_get_one_uid() -> None:
    uids = pool(count=3)
    got = [uids.take(task, 1, 0) for task in ("a", "b", "c")]
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


# -- Slurm: claims on the launcher's shared filesystem ------------------------------------

def claimed(tmp_path: Path, count: int = 3) -> ClaimedUids:
    return ClaimedUids(tmp_path, FIRST, count)


def run_dir(tmp_path: Path, task: str) -> Path:
    path = tmp_path / task / "r1"
    path.mkdir(parents=True, exist_ok=True)
    return path


def test_two_live_jobs_never_claim_one_uid(tmp_path: Path) -> None:
    uids = claimed(tmp_path, count=3)
    got = [uids.take(f"{t}/r1", run_dir(tmp_path, t)) for t in ("a", "b", "c")]
    assert sorted(got) == [FIRST, FIRST + 1, FIRST + 2]
    assert uids.take("a/r1", run_dir(tmp_path, "a")) == got[0]  # asked again: the same
    with pytest.raises(NoFreeUid, match="TASKENV_TASK_UID_COUNT"):
        uids.take("d/r1", run_dir(tmp_path, "d"))


def test_a_job_s_uid_comes_back_when_it_ends_and_survives_a_resubmission(
        tmp_path: Path) -> None:
    uids = claimed(tmp_path, count=1)
    a = run_dir(tmp_path, "a")
    uid = uids.take("a/r1", a)
    shutil.rmtree(a)  # a launch that died left it half-made: made afresh
    assert uids.take("a/r1", run_dir(tmp_path, "a")) == uid
    uids.release(a, "a/r1")
    uids.release(a, "a/r1")
    assert uids.take("b/r1", run_dir(tmp_path, "b")) == uid


def test_the_claim_of_a_job_whose_directory_went_is_recovered(tmp_path: Path) -> None:
    uids = claimed(tmp_path, count=2)
    uid = uids.take("a/r1", run_dir(tmp_path, "a"))
    uids.take("b/r1", run_dir(tmp_path, "b"))
    shutil.rmtree(tmp_path / "a")  # collected by a launcher that stopped before giving it
    assert uids.release_orphans(tmp_path) == 1  # b's job still has its directory
    assert uids.take("c/r1", run_dir(tmp_path, "c")) == uid


def test_many_lapsed_leases_are_recovered_a_bounded_batch_at_a_time() -> None:
    client = fakeredis.FakeRedis()
    uids = pool(count=200, client=client)
    for i in range(200):
        uids.acquire(f"t{i}", 1, 0)
    assert uids.acquire("late", 1, 100) is not None  # every lease lapsed: one batch went
    assert client.zcard(uids.keys[0]) == 200 - 64 + 1
    got = {uids.acquire(f"n{i}", 1, 100) for i in range(199)}
    assert len(got) == 199 and None not in got  # the rest, batch by batch
