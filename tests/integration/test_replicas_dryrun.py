"""Distributed tasks through the real pipeline (Redis, Celery workers, the API) with the
dry-run launcher: each replica's identity recorded, the group's outcome, per-replica logs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from shared.task.replica_logs import MARK
from tests.support.stack import Stack, running_stack
from workers.localstack import RedisServer

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def dry_stack(redis_server: RedisServer,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(redis_server, tmp_path_factory.mktemp("dry"),
                       TASKENV_LAUNCHER="dryrun", TASKENV_MAX_REPLICAS="4") as running:
        yield running


def test_three_replicas_each_get_their_identity_and_the_task_succeeds(dry_stack: Stack) -> None:
    user = dry_stack.new_token("rita")
    task = dry_stack.call("POST", "/api/v1/tasks", token=user, json={
        "name": "ddp", "replicas": 3, "steps": [["python3", "train.py"]],
        "env": [{"name": "LR", "value": "0.1"}]}).json()
    done = dry_stack.wait(task["id"])
    assert done["status"] == "succeeded" and done["replica_exit_codes"] == [0, 0, 0]
    logs = dry_stack.call("GET", f"/api/v1/tasks/{task['id']}/logs", token=user).text
    for k in range(3):
        # The dry run's own lines, each marked as the platform's after its replica's prefix.
        assert f"[replica {k}] {MARK}TASK_REPLICA={k} TASK_REPLICAS=3 RANK={k} WORLD_SIZE=3" \
            in logs
    one = dry_stack.call("GET", f"/api/v1/tasks/{task['id']}/logs?replica=1", token=user)
    assert one.text.startswith(f"{MARK}TASK_REPLICA=1 ") and "[replica" not in one.text
    assert "PET_NODE_RANK=1" in one.text and "RANK=0" not in one.text.replace("_RANK=0", "")
    missing = dry_stack.call("GET", f"/api/v1/tasks/{task['id']}/logs?replica=3", token=user)
    assert missing.status_code == 404 and "0..2" in missing.json()["message"]
    revision = dry_stack.call("GET", f"/api/v1/tasks/{task['id']}/revisions/1", token=user)
    assert revision.json()["replica_exit_codes"] == [0, 0, 0]


def test_another_user_cannot_read_a_replicas_log(dry_stack: Stack) -> None:
    owner, other = dry_stack.new_token("olga"), dry_stack.new_token("mallory")
    task = dry_stack.call("POST", "/api/v1/tasks", token=owner, json={
        "name": "ddp", "replicas": 2, "steps": [["true"]]}).json()
    dry_stack.wait(task["id"])
    peek = dry_stack.call("GET", f"/api/v1/tasks/{task['id']}/logs?replica=0", token=other)
    assert peek.status_code == 404


def test_a_user_setting_rank_is_rejected_by_the_policy_stage_naming_it(dry_stack: Stack) -> None:
    user = dry_stack.new_token("rob")
    task = dry_stack.call("POST", "/api/v1/tasks", token=user, json={
        "name": "ddp", "steps": [["true"]], "env_file": "RANK=3\nWORLD_SIZE=9\n"}).json()
    done = dry_stack.wait(task["id"])
    assert done["status"] == "rejected"
    assert [(e["rule"], e["variable"]) for e in done["errors"]] == [
        ("platform.identity", "RANK"), ("platform.identity", "WORLD_SIZE")]


def test_a_condition_on_replicas_reaches_only_distributed_tasks_and_impact_says_so(
        dry_stack: Stack) -> None:
    single = dry_stack.create({"name": "one", "steps": [["true"]]})
    multi = dry_stack.create({"name": "ddp", "replicas": 2, "steps": [["true"]]})
    for task in (single, multi):
        dry_stack.wait(task["id"])
    draft = {"defaults": [{"name": "NCCL_ASYNC_ERROR_HANDLING", "value": "1",
                           "when": {"replicas": ">1"}}], "protected": []}
    impact = dry_stack.call("POST", "/api/v1/policy/impact", json=draft).json()
    [change] = impact["changes"]
    assert (change["name"], change["kind"]) == ("NCCL_ASYNC_ERROR_HANDLING", "added")
    # Every distributed task of this module (three of them so far) and no other.
    assert change["tasks"] == 3 and multi["id"] in change["examples"], impact
    assert single["id"] not in change["examples"]
    dry_stack.set_policy(draft)
    for body in ({"name": "one", "steps": [["true"]]},
                 {"name": "ddp", "replicas": 3, "steps": [["true"]]}):
        done = dry_stack.wait(dry_stack.create(body)["id"])
        names = {v["name"]: v.get("when") for v in done["resolved_env"]}
        assert ("NCCL_ASYNC_ERROR_HANDLING" in names) == ("replicas" in body)
    dry_stack.set_policy({"defaults": [], "protected": []})
