"""A project draft's predicted impact is what happens once it is saved and tasks run again,
through real Redis and real Celery workers."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from tests.integration.conftest import Stack

pytestmark = pytest.mark.integration

DRAFT = {
    "defaults": [{"name": "LR", "value": "0.1"},
                 {"name": "NCCL_DEBUG", "value": "INFO", "when": {"replicas": ">=2"}}],
    "protected": [],
    "rules": [{"name": "MODE", "allowed": ["fast", "exact"], "description": "two modes only"}],
}
TASKS = [  # owner, env, replicas (a condition the local launcher's tasks can meet)
    ("alice", {"MODE": "fast"}, 1),
    ("alice", {"MODE": "slow"}, 1),
    ("bob", {"MODE": "exact", "LR": "0.9"}, 2),
    ("bob", {"MODE": "exact"}, 2),
]


def policy_free_env(doc: dict[str, Any]) -> dict[str, str]:
    return {v["name"]: v["value"] for v in doc["resolved_env"] or []
            if v["source"] != "platform"}


def observed_changes(before: dict[str, str], after: dict[str, str]) -> set[tuple[Any, ...]]:
    return {(name, before.get(name), after.get(name))
            for name in before.keys() | after.keys() if before.get(name) != after.get(name)}


def test_the_impact_preview_predicts_exactly_what_saving_the_draft_does(stack: Stack) -> None:
    tokens = {owner: stack.new_token(owner) for owner in ("alice", "bob", "carol")}
    made = stack.call("POST", "/api/v1/projects",
                      json={"name": "lab", "members": ["alice", "bob"], "maintainers": ["carol"]})
    assert made.status_code == 201, made.text
    ids: dict[str, str] = {}
    for owner, env, replicas in TASKS:
        body = {"name": "impact", "steps": [["true"]], "replicas": replicas,
                "env": [{"name": k, "value": v} for k, v in env.items()]}
        task_id = stack.create(body, token=tokens[owner])["id"]
        ids[task_id] = owner
    before = {}
    for task_id in ids:
        doc = stack.wait(task_id)
        assert doc["status"] == "succeeded" and doc["project"] == "lab", doc
        before[task_id] = policy_free_env(doc)

    predicted = stack.call("POST", "/api/v1/projects/lab/policy/impact", token=tokens["carol"],
                           json=DRAFT)
    assert predicted.status_code == 200, predicted.text
    impact = predicted.json()
    saved = stack.call("PUT", "/api/v1/projects/lab/policy", token=tokens["carol"], json=DRAFT)
    assert saved.status_code == 200, saved.text
    for task_id, owner in ids.items():
        rerun = stack.call("POST", f"/api/v1/tasks/{task_id}/rerun", token=tokens[owner])
        assert rerun.status_code == 202, rerun.text
    after = {task_id: stack.wait(task_id, revision=2) for task_id in ids}

    rejected = {t for t, doc in after.items() if doc["status"] == "rejected"}
    problems = Counter((e.get("variable"), e["rule"]) for t in rejected
                       for e in after[t]["errors"])
    changes: Counter[tuple[Any, ...]] = Counter()
    for task_id, doc in after.items():
        if task_id not in rejected:
            assert doc["status"] == "succeeded", doc
            assert doc["policy_versions"] == {"platform": 0, "project:lab": 1}
            changes.update(observed_changes(before[task_id], policy_free_env(doc)))
    assert impact["considered"] == len(ids)
    assert impact["rejected"] == len(rejected) == 1
    assert {(r["variable"], r["rule"]): r["tasks"] for r in impact["rejections"]} \
        == dict(problems)
    assert {(c["name"], c["old"], c["new"]): c["tasks"] for c in impact["changes"]} \
        == dict(changes)
    assert impact["changed"] == sum(1 for t in ids if t not in rejected
                                    and observed_changes(before[t],
                                                         policy_free_env(after[t])))
    assert changes == Counter({("LR", None, "0.1"): 2, ("NCCL_DEBUG", None, "INFO"): 2})
