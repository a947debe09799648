"""A host's run slots: leases, a queue in order, and nothing paid per waiting task."""

from __future__ import annotations

import fakeredis

from shared.store.slots import HostSlots

LEASE = 10.0


def slots(cap: int = 2) -> HostSlots:
    return HostSlots(fakeredis.FakeRedis(), "t", "host-a", cap, LEASE)


def test_beyond_the_cap_revisions_wait_in_the_order_they_came() -> None:
    s = slots()
    assert s.acquire("a", 1, 0) and s.acquire("b", 1, 0)
    assert not s.acquire("c", 1, 0) and s.join("c", 1) == 1
    assert not s.acquire("d", 1, 0) and s.join("d", 1) == 2
    assert s.join("c", 1) == 1  # asking again keeps its place
    s.release("a", 1)
    assert not s.acquire("d", 1, 1)  # a free slot, but c waited first
    assert s.promote(1, lambda *_: True, LEASE) == [("c", 1)]
    assert s.acquire("c", 1, 2)  # its reserved slot
    assert (s.running(), s.waiting()) == (2, 1)


def test_a_new_arrival_never_overtakes_the_queue() -> None:
    s = slots(cap=1)
    assert s.acquire("a", 1, 0)
    assert not s.acquire("b", 1, 0) and s.join("b", 1) == 1
    s.release("a", 1)
    assert not s.acquire("late", 1, 1)  # the free slot is b's
    assert s.promote(1, lambda *_: True, LEASE) == [("b", 1)]


def test_a_dead_runner_s_slot_comes_back_when_its_lease_lapses() -> None:
    s = slots(cap=1)
    assert s.acquire("a", 1, 0)
    assert not s.acquire("b", 1, 0) and s.join("b", 1) == 1
    assert s.renew("a", 1, 5)  # alive: renewed to 15
    assert s.promote(14, lambda *_: True, LEASE) == []
    assert s.promote(16, lambda *_: True, LEASE) == [("b", 1)]  # never renewed again
    assert not s.renew("a", 1, 16)


def test_a_revision_cancelled_while_it_waited_hands_its_slot_on() -> None:
    s = slots(cap=1)
    assert s.acquire("a", 1, 0)
    for name in ("gone", "next"):
        assert not s.acquire(name, 1, 0)
        s.join(name, 1)
    s.release("a", 1)
    assert s.promote(1, lambda task, _: task != "gone", LEASE) == [("next", 1)]
    assert s.waiting() == 0 and s.running() == 1


def test_promotion_costs_what_it_promotes_not_what_waits() -> None:
    client = fakeredis.FakeRedis()
    s = HostSlots(client, "t", "host-a", 1, LEASE)
    assert s.acquire("a", 1, 0)
    for i in range(1000):
        s.join(f"w{i}", 1)
    looked: list[str] = []
    assert s.promote(1, lambda task, _: looked.append(task) or True, LEASE) == []
    assert looked == []  # no slot free: not one waiting task looked at
    s.release("a", 1)
    assert s.promote(2, lambda task, _: looked.append(task) or True, LEASE) == [("w0", 1)]
    assert looked == ["w0"]


def test_no_cap_means_no_waiting_and_nothing_written() -> None:
    client = fakeredis.FakeRedis()
    s = HostSlots(client, "t", "h", 0, LEASE)
    assert all(s.acquire(f"t{i}", 1, 0) for i in range(100))
    assert s.promote(0, lambda *_: True, LEASE) == [] and client.keys("*") == []


def test_a_task_of_several_replicas_takes_a_slot_per_replica_and_starts_whole() -> None:
    s = slots(cap=4)
    assert s.acquire("three", 1, 0, weight=3)
    assert not s.acquire("two", 1, 0, weight=2)  # 3 + 2 > 4: not half of it
    assert s.join("two", 1, weight=2) == 1
    assert not s.acquire("one", 1, 0)  # a slot is free, but "two" waited first
    assert s.join("one", 1) == 2
    assert s.promote(0, lambda *_: True, LEASE) == []  # "two" still does not fit whole
    s.release("three", 1)
    assert s.promote(1, lambda *_: True, LEASE) == [("two", 1), ("one", 1)]  # 2 + 1 <= 4
    assert s.acquire("two", 1, 2, weight=2) and s.acquire("one", 1, 2)
    assert not s.acquire("more", 1, 2, weight=2)  # 3 of 4 taken


def test_a_lapsed_lease_gives_back_every_slot_of_its_replicas() -> None:
    s = slots(cap=4)
    assert s.acquire("four", 1, 0, weight=4)
    assert not s.acquire("one", 1, 1)
    assert s.acquire("one", 1, LEASE + 1)  # the runner of "four" died: all 4 came back
    assert s.acquire("three", 1, LEASE + 1, weight=3)
