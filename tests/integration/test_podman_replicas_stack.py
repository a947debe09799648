"""Distributed tasks under TASKENV_LAUNCHER=podman, as a user drives them over the API:
the rendezvous, fail-fast, cancel and restart, on real pods."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.integration.test_podman_lifecycle import ContainerWatch, running_containers, wait_for
from tests.integration.test_podman_pipeline import PodmanStack, podman_stack
from tests.support.podman import podman

pytestmark = [pytest.mark.integration, pytest.mark.podman]
__all__ = ["podman_stack"]

ROOT = Path(__file__).resolve().parents[2]
RENDEZVOUS = (ROOT / "examples/distributed/rendezvous.sh").read_text()


def test_two_replicas_rendezvous_and_each_ones_log_is_kept(podman_stack: PodmanStack) -> None:
    stack = podman_stack
    user = stack.new_token("pia")
    task = stack.call("POST", "/api/v1/tasks", token=user, json={
        "name": "ddp", "replicas": 2, "steps": [["sh", "-c", RENDEZVOUS]]}).json()
    stack.created.append(task["id"])
    done = stack.wait(task["id"], timeout=90)
    assert (done["status"], done["replica_exit_codes"]) == ("succeeded", [0, 0]), done
    zero = stack.call("GET", f"/api/v1/tasks/{task['id']}/logs?replica=0", token=user).text
    assert "rank 0: all 2 replicas met at 127.0.0.1:29500 (sum of ranks 1)" in zero
    both = stack.call("GET", f"/api/v1/tasks/{task['id']}/logs", token=user).text
    assert "[replica 1] rank 1 of 2: sent to 127.0.0.1:29500" in both


def test_one_failing_replica_fails_the_task_within_seconds_and_nothing_runs(
        podman_stack: PodmanStack) -> None:
    stack = podman_stack
    step = ["sh", "-c", 'if [ "$RANK" = 2 ]; then sleep 2; exit 7; fi; exec sleep 300']
    task = stack.create({"name": "ddp", "replicas": 3, "steps": [step]})
    wait_for(lambda: len(running_containers(task["id"])) == 3, 60, "3 replicas running")
    started = time.monotonic()
    done = stack.wait(task["id"], timeout=60)
    assert time.monotonic() - started < 15
    assert (done["status"], done["exit_code"]) == ("failed", 7)
    assert "replica 2 of 3 failed" in done["reason"]
    assert done["replica_exit_codes"][2] == 7
    assert running_containers(task["id"]) == []


def test_cancel_of_three_replicas_leaves_nothing_running(podman_stack: PodmanStack) -> None:
    stack = podman_stack
    task = stack.create({"name": "ddp", "replicas": 3, "steps": [["sleep", "300"]]})
    wait_for(lambda: len(running_containers(task["id"])) == 3, 60, "3 replicas running")
    assert stack.call("POST", f"/api/v1/tasks/{task['id']}/cancel").status_code == 202
    wait_for(lambda: stack.containers(task["id"]) == [], 60, "every replica removed")
    assert stack.task(task["id"])["status"] == "cancelled"


def test_a_restart_reaches_every_replica_and_never_two_generations(
        podman_stack: PodmanStack) -> None:
    stack = podman_stack
    step = ["sh", "-c", 'echo "LR=$LR RANK=$RANK"; exec sleep 300']
    task = stack.create({"name": "ddp", "replicas": 2, "steps": [step],
                         "env": [{"name": "LR", "value": "0.1"}]})
    task_id = task["id"]
    wait_for(lambda: len(running_containers(task_id)) == 2, 60, "2 replicas running")
    wait_for(lambda: stack.task(task_id)["status"] == "running", 30, "running")
    with ContainerWatch(task_id) as watch:
        answer = stack.call("PATCH", f"/api/v1/tasks/{task_id}/env",
                            json={"set": [{"name": "LR", "value": "0.2"}]})
        assert answer.status_code == 202, answer.text
        second = [f"taskenv-{task_id[:20]}-r2-task-{k}" for k in range(2)]
        wait_for(lambda: sorted(running_containers(task_id)) == second, 90, "r2 running")
    assert watch.most == 2, watch.seen  # one generation at a time

    for k, name in enumerate(second):
        wait_for(lambda name=name: "LR=" in podman("logs", name).stdout, 30, "printed")
        assert podman("logs", name).stdout.strip() == f"LR=0.2 RANK={k}"
    stack.call("POST", f"/api/v1/tasks/{task_id}/cancel")


def test_the_example_through_the_cli_submit_replicas_and_logs_replica(
        podman_stack: PodmanStack) -> None:
    from tests.integration.test_cli import taskenv
    stack = podman_stack
    user = stack.new_token("cleo")
    example = str(ROOT / "examples/distributed/task-busybox.yaml")
    submitted = taskenv(stack, user, "submit", example, "--replicas", "3", "--follow")
    task_id = submitted.stderr.split("task ", 1)[1].split()[0]
    stack.created.append(task_id)  # its pod is removed with the others, passed or not
    assert submitted.returncode == 0, submitted.stderr
    assert "[replica 0] rank 0: all 3 replicas met at 127.0.0.1:29500 (sum of ranks 3)" \
        in submitted.stdout
    one = taskenv(stack, user, "logs", task_id, "--replica", "2")
    assert one.stdout == "rank 2 of 3: sent to 127.0.0.1:29500\n", one

    env_file = stack.work_dir.parent / "rank.env"
    env_file.write_text("RANK=5\n", encoding="utf-8")
    refused = taskenv(stack, user, "submit", example, "--env-file", str(env_file))
    assert refused.returncode == 2 and "RANK" in refused.stderr
    assert "per replica" in refused.stderr
