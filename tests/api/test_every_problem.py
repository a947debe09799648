"""Every problem of an env list in one answer, whichever check refuses it first."""

from __future__ import annotations

from collections.abc import Callable

from flask.testing import FlaskClient

from shared.env.envlist import Limits
from shared.policy.model import Policy, Protected
from shared.policy.store import PolicyStore
from shared.store.tasks import TaskStore
from workers import stages

THREE = [{"name": "1BAD", "value": "x"}, {"name": "LR", "value": "0.1"},
         {"name": "LR", "value": "0.2"}, {"name": "CUDA_VISIBLE_DEVICES", "value": "0"}]
EXPECTED = [("name.shell", "1BAD"), ("name.duplicate", "LR"),
            ("policy.protected", "CUDA_VISIBLE_DEVICES")]


def protect_gpus(policies: PolicyStore) -> None:
    policies.put(Policy(protected=(Protected("CUDA_VISIBLE_DEVICES",
                                             "the scheduler assigns GPUs"),)))


def named(problems: list[dict[str, str]]) -> list[tuple[str, str | None]]:
    return [(p["rule"], p.get("variable")) for p in problems]


def test_the_validation_stage_names_all_three(client_for: Callable[..., FlaskClient],
                                             policies: PolicyStore, tasks: TaskStore) -> None:
    protect_gpus(policies)
    alice = client_for("alice")
    created = alice.post("/api/v1/tasks", json={"name": "t", "steps": [["true"]], "env": THREE})
    assert created.status_code == 202
    task_id = created.get_json()["id"]
    assert stages.validate(tasks, Limits(), task_id, 1, policies) is False
    doc = alice.get(f"/api/v1/tasks/{task_id}").get_json()
    assert doc["status"] == "rejected"
    assert named(doc["errors"]) == EXPECTED
    assert "the scheduler assigns GPUs" in doc["errors"][2]["message"]


def test_preview_names_all_three(client_for: Callable[..., FlaskClient],
                                 policies: PolicyStore) -> None:
    protect_gpus(policies)
    got = client_for("alice").post("/api/v1/env/preview", json={"env": THREE}).get_json()
    assert got["ok"] is False and named(got["errors"]) == EXPECTED


def test_a_refusal_for_size_names_every_other_problem_too(
        client_for: Callable[..., FlaskClient], policies: PolicyStore,
        tasks: TaskStore) -> None:
    protect_gpus(policies)
    env = [*THREE, {"name": "BLOB", "value": "x" * (128 * 1024 + 1)}]
    refused = client_for("alice").post("/api/v1/tasks",
                                       json={"name": "t", "steps": [["true"]], "env": env})
    assert refused.status_code == 422
    got = named(refused.get_json()["errors"])
    assert got == [EXPECTED[0], EXPECTED[1], ("value.max_bytes", "BLOB"), EXPECTED[2]]
    assert tasks.r.keys("taskenv:task:*") == []  # nothing stored


def test_a_patch_refused_for_size_names_the_policy_s_problem_too(
        client_for: Callable[..., FlaskClient], policies: PolicyStore) -> None:
    protect_gpus(policies)
    alice = client_for("alice")
    task_id = alice.post("/api/v1/tasks", json={"name": "t", "steps": [["true"]]}).get_json()["id"]
    change = {"set": [{"name": "CUDA_VISIBLE_DEVICES", "value": "1"},
                      {"name": "BLOB", "value": "x" * (128 * 1024 + 1)}]}
    refused = alice.patch(f"/api/v1/tasks/{task_id}/env", json=change)
    assert refused.status_code == 422
    assert named(refused.get_json()["errors"]) == [("value.max_bytes", "BLOB"),
                                                   ("policy.protected", "CUDA_VISIBLE_DEVICES")]
