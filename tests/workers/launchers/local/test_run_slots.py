"""Waiting revisions a lost write stranded are launched again; those that wait are not.

A revision is recorded ``queued`` before it joins the host's queue, and a promoted one
holds its slot before it moves back to ``resolved``.  A worker killed (or Redis lost)
between the two writes leaves it ``queued`` with nothing that would ever move it.
"""

from __future__ import annotations

from shared.store.slots import HostSlots
from shared.store.tasks import TaskStore
from shared.task import states
from tests.workers.test_reconcile import Queue, age, task_in
from workers.launchers.local.slots import admit_waiting, rescue_stranded
from workers.outcomes import move

LEASE = 10.0
STUCK = 10.0


def waiting_revision(tasks: TaskStore, slots: HostSlots, *, joined: bool,
                     host: str | None = None) -> str:
    """A launch that found no slot: recorded as waiting for ``host``'s slots (the stage
    names its own), and in the queue if ``joined``."""
    task_id = task_in(tasks, states.LAUNCHING)
    assert not slots.acquire(task_id, 1, 0)
    assert move(tasks, task_id, 1, states.LAUNCHING, states.QUEUED,
                waits_on=host or slots.host)
    if joined:
        slots.join(task_id, 1)
    return task_id


def full_host(tasks: TaskStore) -> HostSlots:
    slots = HostSlots(tasks.r, "taskenv", "host-a", 1, LEASE)
    assert slots.acquire("holder", 1, 0)
    return slots


def test_a_revision_recorded_as_waiting_but_never_queued_is_launched_again(tasks):
    slots = full_host(tasks)
    stranded = waiting_revision(tasks, slots, joined=False)  # killed before the join
    send = Queue()

    assert rescue_stranded(tasks, slots, send, STUCK, now=age(tasks, stranded) + 1) == 0
    assert rescue_stranded(tasks, slots, send, STUCK, now=age(tasks, stranded) + STUCK) == 1

    assert send.sent == [("launch", stranded, 1)]
    assert tasks.get(stranded)["state"] == states.RESOLVED


def test_a_revision_waiting_in_the_queue_is_left_to_wait(tasks):
    slots = full_host(tasks)
    waiting = waiting_revision(tasks, slots, joined=True)
    send = Queue()

    assert rescue_stranded(tasks, slots, send, STUCK, now=age(tasks, waiting) + 1000) == 0
    assert send.sent == [] and tasks.get(waiting)["state"] == states.QUEUED


def test_a_promoted_revision_whose_move_was_lost_is_launched_once_its_slot_lapses(tasks):
    slots = full_host(tasks)
    promoted = waiting_revision(tasks, slots, joined=True)
    slots.release("holder", 1)
    since = age(tasks, promoted)
    # Promoted (its slot reserved), then the promoter died before moving it on.
    assert slots.promote(since, lambda *_: True, LEASE) == [(promoted, 1)]
    send = Queue()

    assert rescue_stranded(tasks, slots, send, STUCK, now=since + LEASE - 1) == 0  # holds one
    assert rescue_stranded(tasks, slots, send, STUCK, now=since + LEASE + 1) == 1
    assert send.sent == [("launch", promoted, 1)]


def test_admitting_and_rescuing_launch_a_waiting_revision_once(tasks):
    slots = full_host(tasks)
    waiting = waiting_revision(tasks, slots, joined=True)
    slots.release("holder", 1)
    send = Queue()

    assert admit_waiting(tasks, slots, send, LEASE) == 1
    assert rescue_stranded(tasks, slots, send, STUCK, now=age(tasks, waiting) + STUCK) == 0
    assert send.sent == [("launch", waiting, 1)]


def test_a_revision_waiting_for_another_host_s_slots_is_that_host_s_to_judge(tasks):
    slots = full_host(tasks)
    elsewhere = waiting_revision(tasks, slots, joined=False, host="host-b")
    send = Queue()

    assert rescue_stranded(tasks, slots, send, STUCK, now=age(tasks, elsewhere) + 1000) == 0
    assert send.sent == [] and tasks.get(elsewhere)["state"] == states.QUEUED
