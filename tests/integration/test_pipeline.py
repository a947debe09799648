"""From POST to a final state through real Redis and real Celery workers."""

from __future__ import annotations

import json
import time

import pytest
from celery import Celery

from shared.env.identity import Group, replica_env
from tests.integration.conftest import HOSTILE, Stack

pytestmark = pytest.mark.integration

# /proc/self/environ is the environment exactly as the process received it, before the
# interpreter adds anything of its own (Python sets LC_CTYPE when it coerces a C locale).
# Steps run sandboxed, away from this machine's files: what they saw comes back in the log.
DUMP_ENV = """
import json
raw = open('/proc/self/environ', 'rb').read().split(b'\\0')
print('ENV=' + json.dumps(dict(item.decode().split('=', 1) for item in raw if item)))
"""
POLICY = {
    "defaults": [{"name": "NCCL_DEBUG", "value": "INFO"},
                 {"name": "OMP_NUM_THREADS", "value": "4"}],
    "protected": [
        {"name": "DATA_ROOT", "value": "/mnt/datasets",
         "reason": "datasets live on shared storage"},
        {"name": "CUDA_VISIBLE_DEVICES", "reason": "the scheduler assigns GPUs"},
    ],
    "on_conflict": "reject",
}


def dump_steps() -> list[list[str]]:
    return [["python3", "-c", DUMP_ENV], ["python3", "-c", DUMP_ENV]]


def envs_seen(stack: Stack, task_id: str, revision: int = 1) -> list[dict[str, str]]:
    logs = stack.call("GET", f"/api/v1/tasks/{task_id}/logs?revision={revision}").text
    return [json.loads(line[4:]) for line in logs.splitlines() if line.startswith("ENV=")]


def test_task_runs_every_step_with_exactly_the_resolved_env(stack: Stack,
                                                           monkeypatch: pytest.MonkeyPatch):
    policy = stack.set_policy(POLICY)
    steps = dump_steps()
    user_env = [{"name": k, "value": v} for k, v in HOSTILE.items()]
    user_env.append({"name": "OMP_NUM_THREADS", "value": "8"})
    created = stack.create({"name": "hostile-values", "steps": steps, "env": user_env})

    doc = stack.wait(created["id"])

    assert doc["status"] == "succeeded", doc
    assert doc["policy_version"] == policy["version"]
    resolved = {v["name"]: v for v in doc["resolved_env"]}
    assert resolved["DATA_ROOT"]["source"] == "protected"
    assert resolved["NCCL_DEBUG"]["source"] == "default"
    assert resolved["OMP_NUM_THREADS"] == {
        "name": "OMP_NUM_THREADS", "value": "8", "source": "user", "overrode": ["default"],
        "shadowed": [{"scope": "platform", "source": "default", "value": "4"}],
        "secret": False}
    assert resolved["TASK_ID"]["value"] == created["id"]
    assert "CUDA_VISIBLE_DEVICES" not in resolved
    expected = {name: v["value"] for name, v in resolved.items()}
    seen_by_steps = envs_seen(stack, created["id"])
    assert len(seen_by_steps) == 2
    for seen in seen_by_steps:
        assert seen.pop("HOME") == "/home/task"  # the task's own home, in its sandbox
        assert seen.pop("PATH") == "/usr/local/bin:/usr/bin:/bin"
        assert seen == {**expected, **dict(replica_env(Group(), 0))}  # and its identity:
        # nothing missing, nothing from the worker's environment
    for name, value in HOSTILE.items():
        assert expected[name] == value


def test_protected_variable_rejects_the_task_with_name_and_reason(stack: Stack):
    stack.set_policy(POLICY)
    steps = dump_steps()
    created = stack.create({"name": "sets-locked", "steps": steps,
                            "env": [{"name": "DATA_ROOT", "value": "/home/me/data"}]})

    doc = stack.wait(created["id"])

    assert doc["status"] == "rejected"
    [error] = doc["errors"]
    assert error["variable"] == "DATA_ROOT"
    assert error["rule"] == "policy.protected"
    assert "datasets live on shared storage" in error["message"]
    assert envs_seen(stack, created["id"]) == []  # nothing ran


def test_drop_mode_leaves_the_variable_out_with_a_warning(stack: Stack):
    stack.set_policy({**POLICY, "on_conflict": "drop"})
    steps = dump_steps()
    created = stack.create({"name": "dropped", "steps": steps,
                            "env": [{"name": "CUDA_VISIBLE_DEVICES", "value": "0,1"},
                                    {"name": "LR", "value": "0.1"}]})

    doc = stack.wait(created["id"])

    assert doc["status"] == "succeeded"
    assert [w["variable"] for w in doc["warnings"]] == ["CUDA_VISIBLE_DEVICES"]
    seen = envs_seen(stack, created["id"])[0]
    assert "CUDA_VISIBLE_DEVICES" not in seen and seen["LR"] == "0.1"


def test_invalid_env_is_rejected_with_every_problem(stack: Stack):
    steps = dump_steps()
    created = stack.create({"name": "bad-env", "steps": steps, "env": [
        {"name": "1BAD", "value": "x"},
        {"name": "DUP", "value": "a"}, {"name": "DUP", "value": "b"},
    ]})

    doc = stack.wait(created["id"])

    assert doc["status"] == "rejected"
    rules = {(e["rule"], e.get("variable")) for e in doc["errors"]}
    assert rules == {("name.shell", "1BAD"), ("name.duplicate", "DUP")}


def test_an_oversized_value_is_refused_before_anything_is_stored(stack: Stack):
    before = stack.call("GET", "/api/v1/tasks?limit=500").json()["items"]
    resp = stack.call("POST", "/api/v1/tasks", json={"name": "too-big", "steps": dump_steps(),
                                                     "env": [
        {"name": "BIG", "value": "x" * (128 * 1024 + 1)}]})

    assert resp.status_code == 422
    [problem] = resp.json()["errors"]
    assert (problem["rule"], problem["variable"], problem["limit"]) == (
        "value.max_bytes", "BIG", 128 * 1024)
    assert stack.call("GET", "/api/v1/tasks?limit=500").json()["items"] == before


def test_failing_step_fails_the_task_and_keeps_its_output(stack: Stack):
    created = stack.create({"name": "fails", "steps": [
        ["sh", "-c", "echo preparing; exit 3"], ["sh", "-c", "echo never"]]})

    doc = stack.wait(created["id"])

    assert doc["status"] == "failed" and doc["exit_code"] == 3
    logs = stack.call("GET", f"/api/v1/tasks/{created['id']}/logs").text
    assert "preparing" in logs and "never" not in logs


def test_redelivered_messages_never_run_a_revision_twice(stack: Stack):
    body = {"name": "once", "steps": [["echo", "ran-once"]]}
    created = stack.create(body)
    broker = Celery(broker=stack.env["TASKENV_REDIS_URL"])
    broker.conf.broker_transport_options = {
        "global_keyprefix": f"{stack.env['TASKENV_KEY_PREFIX']}:celery:"}
    # Every stage gets its message a second (and third) time, as after a redelivery.
    for _ in range(2):
        for stage in ("validate", "policy", "launch"):
            broker.send_task(f"taskenv.{stage}", args=[created["id"], 1], queue=stage)

    doc = stack.wait(created["id"])
    time.sleep(2)  # let the duplicates drain through all three queues

    assert doc["status"] == "succeeded"
    logs = stack.call("GET", f"/api/v1/tasks/{created['id']}/logs").text
    assert logs.count("ran-once\n") == 1
    assert stack.task(created["id"])["status"] == "succeeded"


def test_idempotency_key_makes_a_retry_return_the_same_task(stack: Stack):
    body = {"name": "retried", "steps": [["true"]]}
    first = stack.create(body, headers={"Idempotency-Key": "client-retry-1"})
    second = stack.create(body, headers={"Idempotency-Key": "client-retry-1"})

    assert first["id"] == second["id"]
    assert stack.wait(first["id"])["status"] == "succeeded"


def test_changing_the_env_makes_a_new_revision_that_runs(stack: Stack):
    stack.set_policy(POLICY)
    created = stack.create({"name": "revised", "steps": [["python3", "-c", DUMP_ENV]],
                            "env": [{"name": "LR", "value": "0.1"},
                                    {"name": "BATCH", "value": "32"}]})
    stack.wait(created["id"])

    resp = stack.call("PATCH", f"/api/v1/tasks/{created['id']}/env",
                      json={"set": [{"name": "LR", "value": "0.05"},
                                    {"name": "EPOCHS", "value": "3"}],
                            "unset": ["BATCH"]})
    assert resp.status_code == 202, resp.text
    doc = stack.wait(created["id"], revision=2)

    assert doc["status"] == "succeeded"
    [seen] = envs_seen(stack, created["id"], revision=2)
    assert (seen["LR"], seen["EPOCHS"], seen["TASK_ENV_REVISION"]) == ("0.05", "3", "2")
    assert "BATCH" not in seen


def test_a_rejection_names_every_problem_the_policy_s_included(stack: Stack):
    """1BAD, a duplicate and a protected variable: the validation worker names all three,
    the protected one with the admin's reason, in the one rejection."""
    stack.set_policy(POLICY)
    env = [{"name": "1BAD", "value": "x"}, {"name": "LR", "value": "0.1"},
           {"name": "LR", "value": "0.2"}, {"name": "CUDA_VISIBLE_DEVICES", "value": "0"}]
    created = stack.create({"name": "three-problems", "steps": [["true"]], "env": env})
    doc = stack.wait(created["id"])
    assert doc["status"] == "rejected", doc
    assert [(e["rule"], e.get("variable")) for e in doc["errors"]] == [
        ("name.shell", "1BAD"), ("name.duplicate", "LR"),
        ("policy.protected", "CUDA_VISIBLE_DEVICES")]
    assert "the scheduler assigns GPUs" in doc["errors"][2]["message"]
