"""GET /api/v1/tasks/{id}/manifest: the workload as Kubernetes would get it."""

from __future__ import annotations

import json
from collections.abc import Callable

from flask.testing import FlaskClient

from shared.env import envlist
from shared.policy.model import Policy, Protected, platform_env, resolve
from shared.policy.store import PolicyStore
from shared.store.tasks import TaskStore
from shared.task import states
from tests.api.conftest import task_body

SECRET = "hf_manifest-secret-0b7d"


def resolve_in_store(tasks: TaskStore, policies: PolicyStore, task_id: str) -> None:
    """Do what the policy worker does, so the task has a resolved env."""
    doc = tasks.get(task_id)
    policy = policies.current()
    result = resolve(envlist.parse(doc["env"]), policy,
                     platform_env(task_id, doc["name"], 1, policy.version))
    tasks.transition(task_id, 1, states.PENDING, states.VALIDATED)
    tasks.transition(task_id, 1, states.VALIDATED, states.RESOLVED,
                     resolved=[v.to_dict() for v in result.variables],
                     policy_version=policy.version)


def container(body: dict) -> dict:
    return body["job"]["spec"]["template"]["spec"]["containers"][0]


def test_secrets_appear_only_as_references(client: FlaskClient, create_task: Callable,
                                          tasks: TaskStore, policies: PolicyStore):
    task_id = create_task(env=[{"name": "HF_TOKEN", "value": SECRET, "secret": True},
                               {"name": "LR", "value": "0.1"}])
    resolve_in_store(tasks, policies, task_id)

    resp = client.get(f"/api/v1/tasks/{task_id}/manifest")

    assert resp.status_code == 200
    body = resp.get_json()
    assert SECRET not in resp.get_data(as_text=True)
    assert body["resolved"] is True and body["revision"] == 1
    env = {e["name"]: e for e in container(body)["env"]}
    assert env["LR"]["value"] == "0.1"
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == \
        body["secret"]["metadata"]["name"]
    assert body["secret"]["data"] == {"HF_TOKEN": "<redacted>"}
    assert env["TASK_ID"]["value"] == task_id


def test_a_pending_task_shows_what_would_be_submitted(client: FlaskClient,
                                                     create_task: Callable,
                                                     policies: PolicyStore):
    policies.put(Policy(protected=(Protected("DATA_ROOT", "shared storage", "/mnt/data"),)))
    task_id = create_task(env=[{"name": "LR", "value": "$(HOME)"}])

    body = client.get(f"/api/v1/tasks/{task_id}/manifest").get_json()

    assert body["resolved"] is False and body["policy_version"] == 1
    env = {e["name"]: e.get("value") for e in container(body)["env"]}
    assert env["DATA_ROOT"] == "/mnt/data"
    assert env["LR"] == "$$(HOME)"  # Kubernetes turns $$ into $: the value stays literal


def test_an_env_the_policy_refuses_has_no_manifest(client: FlaskClient, create_task: Callable,
                                                  policies: PolicyStore):
    policies.put(Policy(protected=(Protected("DATA_ROOT", "shared storage"),)))
    task_id = create_task(env=[{"name": "DATA_ROOT", "value": "/tmp"}])

    resp = client.get(f"/api/v1/tasks/{task_id}/manifest")

    assert resp.status_code == 422
    assert resp.get_json()["errors"][0]["variable"] == "DATA_ROOT"


def test_another_users_manifest_is_not_found(client_for: Callable):
    alice, bob = client_for("alice"), client_for("bob")
    task_id = alice.post("/api/v1/tasks", json=task_body()).get_json()["id"]

    resp = bob.get(f"/api/v1/tasks/{task_id}/manifest")

    assert resp.status_code == 404
    assert json.loads(resp.get_data())["code"] == "not_found"


def test_a_task_that_names_no_image_shows_the_kubernetes_default_image(
        admin_client_with: Callable[..., FlaskClient]):
    client = admin_client_with(kube_image="registry.example.com/train/base:2.1",
                               launcher="kubernetes")  # where image names an image
    unnamed = client.post("/api/v1/tasks", json=task_body()).get_json()["id"]
    named = client.post("/api/v1/tasks", json=task_body(image="nvcr.io/x/pytorch:24.01")
                        ).get_json()["id"]

    images = [container(client.get(f"/api/v1/tasks/{t}/manifest").get_json())["image"]
              for t in (unnamed, named)]

    assert images == ["registry.example.com/train/base:2.1", "nvcr.io/x/pytorch:24.01"]
