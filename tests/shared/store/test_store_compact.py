"""The resolved env's stored form: compact and deflated, read back exactly as written."""

from __future__ import annotations

import json
from typing import Any

import fakeredis

from shared.secrets import Cipher, new_key
from shared.store.tasks import TaskStore
from shared.task import records, states

SECRET = "hunter2-very-secret"


def resolved_task(n: int) -> dict[str, Any]:
    env = [{"name": f"USER_{i}", "value": f"value-{i}"} for i in range(n)]
    env.append({"name": "TOKEN", "value": SECRET, "secret": True})
    doc = records.new_task({"name": "train", "steps": [["true"]], "env": env}, "alice")
    doc["resolved"] = [
        *({"name": e["name"], "value": e["value"], "source": "user", "overrode": [],
           "secret": bool(e.get("secret"))} for e in env),
        *({"name": f"DEFAULT_{i}", "value": f"d-{i}", "source": "default", "overrode": [],
           "secret": False, "scope": "platform", "policy_version": 3} for i in range(n)),
        {"name": "USER_0", "value": "value-0", "source": "user", "overrode": ["default"],
         "secret": False, "scope": "project:vision", "policy_version": 1,
         "shadowed": [{"source": "default", "scope": "platform", "value": "x"}]},
    ]
    doc["state"] = states.RESOLVED
    return doc


def test_the_resolved_env_reads_back_exactly_and_smaller(redis_client: fakeredis.FakeRedis) -> None:
    tasks = TaskStore(redis_client, cipher=Cipher([new_key()]))
    doc = resolved_task(40)
    expected = json.loads(json.dumps(doc["resolved"]))
    task_id = tasks.create(doc)[0]["id"]
    assert tasks.get(task_id)["resolved"] == expected
    assert tasks.revision(task_id, 1)["resolved"] == expected
    raw = redis_client.hget(tasks.keys.revision(task_id, 1), "resolved")
    assert len(raw) < len(json.dumps(expected)) / 3
    assert SECRET not in json.dumps(redis_client.hgetall(tasks.keys.revision(task_id, 1)))


def test_a_record_stored_whole_still_loads(redis_client: fakeredis.FakeRedis) -> None:
    tasks = TaskStore(redis_client)
    doc = resolved_task(3)
    doc["env"], doc["resolved"] = doc["env"][:-1], doc["resolved"][:3]
    task_id = tasks.create(doc)[0]["id"]
    redis_client.hset(tasks.keys.revision(task_id, 1), "resolved", json.dumps(doc["resolved"]))
    assert tasks.get(task_id)["resolved"] == doc["resolved"]


def test_a_reseal_keeps_the_resolved_env_whole(redis_client: fakeredis.FakeRedis) -> None:
    old, new = new_key(), new_key()
    doc = resolved_task(40)
    expected = json.loads(json.dumps(doc["resolved"]))
    task_id = TaskStore(redis_client, cipher=Cipher([old])).create(doc)[0]["id"]
    TaskStore(redis_client, cipher=Cipher([new, old])).reseal(task_id)
    assert TaskStore(redis_client, cipher=Cipher([new])).get(task_id)["resolved"] == expected
