"""Nothing a user was told was accepted is lost: crashes, restarts, outages.

Each test prints its counts (run pytest with -s to see them) and asserts that
no accepted task is lost and no task revision is launched twice.
"""

from __future__ import annotations

import random
import threading
import time

import pytest

from tests.faults.conftest import FaultStack, in_background

pytestmark = pytest.mark.integration

TASKS = 100


def submit_all(stack: FaultStack, ids: list[str], prefix: str) -> None:
    for n in range(TASKS):
        task_id = stack.post(stack.counting_task(n), key=f"{prefix}-{n}")
        if task_id is not None:
            ids.append(task_id)


def test_killing_workers_of_every_stage_loses_nothing(fault_stack: FaultStack):
    ids: list[str] = []
    submitter = in_background(submit_all, fault_stack, ids, "kill")
    kills = 0
    rng = random.Random(7)
    deadline = time.monotonic() + 40
    while (submitter.is_alive() or kills < 12) and time.monotonic() < deadline:
        time.sleep(rng.uniform(0.5, 1.2))
        fault_stack.kill_worker(rng.choice(["validate", "policy", "launch"]))
        kills += 1
    submitter.join()

    report = fault_stack.report(TASKS, ids)

    print("\n" + report.line(f"SIGKILL x{kills}"))
    assert len(ids) == TASKS
    assert report.lost == 0
    assert report.launched_twice == 0
    assert report.states["succeeded"] > 0


def test_restarting_redis_loses_no_accepted_task(fault_stack: FaultStack):
    ids: list[str] = []
    submitter = in_background(submit_all, fault_stack, ids, "redis")
    while len(ids) < TASKS // 3:
        time.sleep(0.05)
    fault_stack.restart_redis(down_for=1.0)
    submitter.join()

    report = fault_stack.report(TASKS, ids)

    print("\n" + report.line("redis restart") + f" worker_self_restarts={fault_stack.restarts}")
    assert len(set(ids)) == len(ids) == TASKS  # retries with a key never made a second task
    assert report.lost == 0
    assert report.launched_twice == 0
    assert report.states["succeeded"] == TASKS


def test_a_message_lost_before_enqueue_is_recovered_by_the_reconciler(fault_stack: FaultStack):
    # The record is written, but its message never reaches the queue (as when Redis
    # restarts between the two): only the reconciler can move the task on.
    import redis as redis_lib

    from shared.store.tasks import TaskStore
    from shared.task import records

    client = redis_lib.Redis.from_url(fault_stack.redis.url, decode_responses=True)
    store = TaskStore(client)
    doc, _ = store.create(records.new_task(fault_stack.counting_task(0), "admin"))
    threading.Event().wait(0)

    report = fault_stack.report(1, [doc["id"]], timeout=30)

    print("\n" + report.line("lost message"))
    assert report.states["succeeded"] == 1 and report.lost == 0
