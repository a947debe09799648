"""A host runs at most TASKENV_LOCAL_MAX_RUNNING local tasks at once; the rest wait in
order, through the real stack (API, Celery workers, runners, reconciler, Redis)."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.config import Settings
from tests.integration.conftest import FINAL, Stack, running_stack
from workers.launchers.common.containment import remove_leftovers
from workers.launchers.local.launcher import runner_alive
from workers.localstack import RedisServer

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(redis_server, tmp_path_factory.mktemp("slots"),
                       TASKENV_LOCAL_MAX_RUNNING="2",
                       TASKENV_LOCAL_HOST_NAME=f"host-{uuid.uuid4().hex[:6]}",
                       TASKENV_HEARTBEAT_SECONDS="1",
                       TASKENV_RECONCILE_INTERVAL_SECONDS="1") as running:
        yield running


def statuses(stack: Stack, ids: list[str]) -> list[str]:
    return [stack.task(task_id)["status"] for task_id in ids]


def test_tasks_beyond_the_cap_wait_and_start_in_the_order_they_came(stack: Stack) -> None:
    token = stack.new_token(f"alice-{uuid.uuid4().hex[:6]}")
    ids = [stack.create({"name": f"t{i}", "steps": [["sleep", "1.5"]]}, token=token)["id"]
           for i in range(6)]
    most_running, seen_queued = 0, False
    deadline = time.monotonic() + 90
    while True:
        now = statuses(stack, ids)
        most_running = max(most_running, now.count("running"))
        seen_queued = seen_queued or "queued" in now
        if all(s in FINAL for s in now):
            break
        assert time.monotonic() < deadline, now
        time.sleep(0.05)
    assert most_running <= 2 and seen_queued
    assert statuses(stack, ids) == ["succeeded"] * 6
    events = {task_id: stack.task(task_id)["events"] for task_id in ids}
    queued_at = {task_id: next(e["at"] for e in found if e["state"] == "queued")
                 for task_id, found in events.items() if any(e["state"] == "queued" for e in found)}
    # The stages may hand tasks to the launcher in another order than they were created:
    # the queue's promise is that waiting tasks leave it (queued -> resolved, handed back
    # to the launch stage) in the order they began to wait.  Two leaving at once may then
    # be launched by two workers in either order, so "running" is not compared.
    left = {task_id: next(e["at"] for e in events[task_id][1:] if e["state"] == "resolved"
                          and e["at"] > queued_at[task_id]) for task_id in queued_at}
    assert len(queued_at) >= 4
    in_queue_order = sorted(queued_at, key=queued_at.__getitem__)
    assert sorted(queued_at, key=left.__getitem__) == in_queue_order
    log = stack.call("GET", f"/api/v1/tasks/{in_queue_order[-1]}/logs", token=token).text
    assert "waiting for a run slot" in log


def test_a_dead_runner_s_slot_comes_back_to_the_next_waiting_task(stack: Stack) -> None:
    token = stack.new_token(f"bob-{uuid.uuid4().hex[:6]}")
    long = [stack.create({"name": "long", "steps": [["sleep", "120"]]}, token=token)["id"]
            for _ in range(2)]
    deadline = time.monotonic() + 30
    while statuses(stack, long) != ["running", "running"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    waiting = stack.create({"name": "next", "steps": [["true"]]}, token=token)["id"]
    while stack.task(waiting)["status"] != "queued":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    pid_file = Path(stack.work_dir) / long[0] / "r1" / "runner.pid"
    os.killpg(int(pid_file.read_text().split()[0]), signal.SIGKILL)  # the runner dies
    assert stack.wait(waiting, timeout=60)["status"] == "succeeded"
    stack.call("POST", f"/api/v1/tasks/{long[1]}/cancel", token=token)
    other = Path(stack.work_dir) / long[1] / "r1"
    deadline = time.monotonic() + 30
    while runner_alive(other):  # stopped by the stack, not left running after the test
        assert time.monotonic() < deadline
        time.sleep(0.1)
    # The reconciler removes what the dead runner left once TASKENV_STUCK_AFTER_SECONDS
    # have passed; this test does not wait that long.
    remove_leftovers(Settings(), f"taskenv-{long[0]}-r1")
