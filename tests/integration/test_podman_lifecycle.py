"""A running task's life under TASKENV_LAUNCHER=podman: cancel, restart with a changed
env, and a change kept for the next run; real pods, checked with podman itself."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from shared.keys import Keys
from shared.task import manifest
from tests.integration.test_podman_pipeline import (
    DUMP,
    PodmanStack,
    podman_stack,
    runtime_added,
)
from tests.support.podman import env_dumps, podman

pytestmark = [pytest.mark.integration, pytest.mark.podman]
__all__ = ["podman_stack"]  # the module's stack fixture, shared


def running_containers(task_id: str) -> list[str]:
    label = f"label={manifest.LABEL_TASK_ID}={task_id}"
    return podman("ps", "--filter", label, "--format", "{{.Names}}").stdout.split()


def container(task_id: str, revision: int) -> str:
    return f"taskenv-{task_id[:20]}-r{revision}-task"


def wait_for(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def reconciler_passes(stack: PodmanStack, count: int, timeout: float = 60) -> None:
    """Wait for ``count`` whole passes of the reconciler from now (each stamps its end)."""
    key = Keys(stack.env.get("TASKENV_KEY_PREFIX", "taskenv")).reconciler_last_pass()
    for _ in range(count + 1):  # a pass under way now may have looked before the change
        since = time.time()
        wait_for(lambda since=since: float(stack.redis.get(key) or 0) > since, timeout,
                 "a reconciler pass")


def start_running(stack: PodmanStack, env: dict[str, str]) -> str:
    """A task whose first step prints its env and whose second sleeps, once it runs."""
    task = stack.create({"name": "lifecycle", "steps": [DUMP, ["sleep", "60"]],
                         "env": [{"name": k, "value": v} for k, v in env.items()]})
    task_id = task["id"]
    wait_for(lambda: running_containers(task_id) == [container(task_id, 1)], 60, "running")
    wait_for(lambda: stack.task(task_id)["status"] == "running", 30, "running state")
    return task_id


class ContainerWatch:
    """Polls ``podman ps`` while a switch happens: the most containers seen at once."""

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        self.most = 0
        self.seen: set[str] = set()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self.done.is_set():
            names = running_containers(self.task_id)
            self.most = max(self.most, len(names))
            self.seen.update(names)

    def __enter__(self) -> ContainerWatch:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join(timeout=30)


@pytest.fixture
def stack(podman_stack: PodmanStack) -> Iterator[PodmanStack]:
    """This module's stack (``podman_stack``, with the podman launcher)."""
    yield podman_stack


def test_cancel_removes_the_running_pod(stack: PodmanStack) -> None:
    task_id = start_running(stack, {"LR": "0.1"})
    response = stack.call("POST", f"/api/v1/tasks/{task_id}/cancel")
    assert response.status_code == 202, response.text
    assert response.json()["status"] == "cancelled"
    pod = f"taskenv-{task_id[:20]}-r1"
    wait_for(lambda: podman("pod", "exists", pod).returncode == 1, 60, "pod removed")
    assert stack.containers(task_id) == []
    assert stack.task(task_id)["status"] == "cancelled"
    assert stack.call("POST", f"/api/v1/tasks/{task_id}/cancel").status_code == 200


def test_restart_replaces_the_container_and_never_runs_two(stack: PodmanStack) -> None:
    task_id = start_running(stack, {"LR": "0.1", "BATCH": "32"})
    with ContainerWatch(task_id) as watch:
        response = stack.call("PATCH", f"/api/v1/tasks/{task_id}/env", json={
            "set": [{"name": "LR", "value": "0.2"}], "unset": ["BATCH"], "apply": "restart"},
            headers={"If-Match": '"1"'})
        assert response.status_code == 202, response.text
        second = container(task_id, 2)
        wait_for(lambda: running_containers(task_id) == [second], 90, "revision 2 running")
    assert watch.most == 1, watch.seen  # one container at a time, never two
    assert podman("container", "exists", container(task_id, 1)).returncode == 1  # gone
    doc = stack.task(task_id)
    assert (doc["revision"], doc["status"]) == (2, "running")
    resolved = {v["name"]: v["value"] for v in doc["resolved_env"]}
    assert resolved["LR"] == "0.2" and "BATCH" not in resolved
    wait_for(lambda: podman("logs", second).stdout.endswith("\0"), 30, "env printed")
    [seen] = env_dumps(podman("logs", second).stdout, 1)
    assert seen == {**runtime_added(task_id, 2), **resolved}
    stale = stack.call("PATCH", f"/api/v1/tasks/{task_id}/env",
                       json={"set": [{"name": "LR", "value": "9"}]},
                       headers={"If-Match": '"1"'})
    assert stale.status_code == 412 and stale.json()["revision"] == 2
    stack.call("POST", f"/api/v1/tasks/{task_id}/cancel")


def test_next_run_leaves_the_container_running_and_the_rerun_gets_the_change(
        stack: PodmanStack) -> None:
    task_id = start_running(stack, {"LR": "0.1"})
    response = stack.call("PATCH", f"/api/v1/tasks/{task_id}/env", json={
        "set": [{"name": "LR", "value": "0.3"}], "apply": "next-run"})
    assert response.status_code == 202, response.text
    reconciler_passes(stack, 2)  # two passes since: neither may apply it
    assert running_containers(task_id) == [container(task_id, 1)]
    doc = stack.task(task_id)
    assert (doc["revision"], doc["status"]) == (1, "running")
    assert doc["next_env"] == [{"name": "LR", "value": "0.3", "secret": False}]
    stack.call("POST", f"/api/v1/tasks/{task_id}/cancel")
    wait_for(lambda: running_containers(task_id) == [], 60, "stopped")
    rerun = stack.call("POST", f"/api/v1/tasks/{task_id}/rerun")
    assert rerun.status_code == 202, rerun.text
    assert rerun.json()["revision"] == 2
    wait_for(lambda: running_containers(task_id) == [container(task_id, 2)], 60, "rerun")
    doc = stack.task(task_id)
    resolved = {v["name"]: v["value"] for v in doc["resolved_env"]}
    assert doc["revision"] == 2 and resolved["LR"] == "0.3" and doc["next_env"] is None
    wait_for(lambda: podman("logs", container(task_id, 2)).stdout.endswith("\0"), 30, "env")
    [seen] = env_dumps(podman("logs", container(task_id, 2)).stdout, 1)
    assert seen == {**runtime_added(task_id, 2), **resolved}
    stack.call("POST", f"/api/v1/tasks/{task_id}/cancel")
