"""Cancel and restart on the real stack with the local launcher: real runners, real
sandboxes, real processes, checked on the host."""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import Stack

pytestmark = pytest.mark.integration


def unique_sleep(seconds: int) -> str:
    """A sleep duration no other test runs, so the host's processes can be told apart."""
    return f"{seconds}.{random.randrange(10**8, 10**9)}"


def leftovers(stack: Stack, task_ids: list[str], marker: str) -> list[str]:
    """Processes of these tasks still on the host: a runner (its working directory is
    the task's) or anything whose command line holds the marker (bwrap, sh, sleep)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue  # ended meanwhile, or not ours to read
        if marker in cmdline or any(f"/{t}/" in cwd + "/" for t in task_ids):
            found.append(f"{pid}: {cmdline}")
    return found


def wait_for(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_cancel_racing_the_launch_never_leaves_anything_running(stack: Stack) -> None:
    seconds = unique_sleep(30)
    rng = random.Random(11)

    def create_and_cancel(results: list[str]) -> None:
        task = stack.create({"name": "race", "steps": [["sh", "-c", f"sleep {seconds}"]]})
        time.sleep(rng.uniform(0, 0.3))
        response = stack.call("POST", f"/api/v1/tasks/{task['id']}/cancel")
        assert response.status_code in (200, 202), response.text
        results.append(task["id"])

    task_ids: list[str] = []
    for _ in range(4):  # twenty in all, five at a time
        threads = [threading.Thread(target=create_and_cancel, args=(task_ids,))
                   for _ in range(5)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert len(task_ids) == 20

    def all_cancelled() -> bool:
        return all(stack.task(t)["status"] == "cancelled" for t in task_ids)

    wait_for(all_cancelled, 30, "every task cancelled")
    wait_for(lambda: not leftovers(stack, task_ids, f"sleep {seconds}"), 30,
             f"processes left: {leftovers(stack, task_ids, f'sleep {seconds}')}")
    time.sleep(2)  # a launch still in flight would start something now: it must not
    assert leftovers(stack, task_ids, f"sleep {seconds}") == []
    assert all_cancelled()
    for task_id in task_ids:
        doc = stack.task(task_id)
        assert doc["cancelled_by"] == "admin" and doc["cancelled_at"].endswith("Z")


def test_a_running_task_restarts_with_its_new_env_once_the_old_run_is_gone(
        stack: Stack) -> None:
    seconds = unique_sleep(60)
    steps = [["sh", "-c", 'echo "LR=$LR"'], ["sh", "-c", f"sleep {seconds}"]]
    task = stack.create({"name": "restart", "steps": steps,
                         "env": [{"name": "LR", "value": "0.1"}]})
    task_id = task["id"]
    wait_for(lambda: stack.task(task_id)["status"] == "running", 30, "running")
    wait_for(lambda: len(leftovers(stack, [], f"sleep {seconds}")) > 0, 30, "sleeping")
    response = stack.call("PATCH", f"/api/v1/tasks/{task_id}/env",
                          json={"set": [{"name": "LR", "value": "0.2"}], "apply": "restart"},
                          headers={"If-Match": '"1"'})
    assert response.status_code == 202, response.text
    assert response.json()["revision"] == 2

    def second_running() -> bool:
        doc = stack.task(task_id)
        return doc["revision"] == 2 and doc["status"] == "running"

    wait_for(second_running, 30, "revision 2 running")
    log = stack.call("GET", f"/api/v1/tasks/{task_id}/logs?revision=2").text
    wait_for(lambda: "LR=0.2" in stack.call(
        "GET", f"/api/v1/tasks/{task_id}/logs?revision=2").text, 10, f"log: {log}")
    runners = [p for p in leftovers(stack, [task_id], "\0never\0") if "workers.local_run" in p]
    assert len(runners) == 1  # revision 1's runner is gone, revision 2's runs
    first = stack.call("GET", f"/api/v1/tasks/{task_id}/logs?revision=1").text
    assert "LR=0.1" in first
    stack.call("POST", f"/api/v1/tasks/{task_id}/cancel")
    wait_for(lambda: not leftovers(stack, [task_id], f"sleep {seconds}"), 30, "cleaned up")
