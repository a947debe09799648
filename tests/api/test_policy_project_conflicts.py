"""A platform policy saved under project policies it now refuses: the save stands, and the
response, the audit log, each project's policy and the console say which and why."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from api import actions
from tests.api.conftest import Browser

SECRET = "wandb-key-that-must-stay-hidden-42"
TIGHTER = {"defaults": [],
           "protected": [{"name": "DATASET_ROOT", "value": "/shared/data",
                          "reason": "one dataset root for the cluster"}],
           "rules": [{"name": "NCCL_DEBUG", "allowed": ["WARN", "INFO"],
                      "description": "TRACE fills the disks"}]}


def put(client: FlaskClient, path: str, **policy: Any) -> Any:
    resp = client.put(path, json={"defaults": [], "protected": [], **policy})
    assert resp.status_code == 200, resp.get_json()
    return resp.get_json()


@pytest.fixture
def projects(client: FlaskClient) -> None:
    """vision sets DATASET_ROOT and a secret, audio sets NCCL_DEBUG=TRACE, speech conforms;
    all saved while the platform policy allowed them."""
    for name in ("vision", "audio", "speech"):
        made = client.post("/api/v1/projects", json={"name": name, "maintainers": ["carol"]})
        assert made.status_code == 201, made.get_json()
    put(client, "/api/v1/projects/vision/policy",
        defaults=[{"name": "DATASET_ROOT", "value": "/data/vision"},
                  {"name": "WANDB_API_KEY", "value": SECRET, "secret": True}])
    put(client, "/api/v1/projects/audio/policy",
        defaults=[{"name": "NCCL_DEBUG", "value": "TRACE"}])
    put(client, "/api/v1/projects/speech/policy",
        defaults=[{"name": "NCCL_DEBUG", "value": "INFO"}])


def conflicts_by_project(body: dict[str, Any]) -> dict[str, list[tuple[str, str]]]:
    return {c["project"]: [(p["variable"], p["rule"]) for p in c["problems"]]
            for c in body["project_conflicts"]}


@pytest.mark.usefixtures("projects")
def test_saving_a_tighter_platform_policy_succeeds_and_names_the_projects_in_conflict(
        client: FlaskClient) -> None:
    body = put(client, "/api/v1/policy", **TIGHTER)
    assert body["version"] == 1
    assert client.get("/api/v1/policy").get_json()["version"] == 1
    assert conflicts_by_project(body) == {
        "audio": [("NCCL_DEBUG", "rule.allowed")],
        "vision": [("DATASET_ROOT", "layer.platform_protected")],
    }
    audio = next(c for c in body["project_conflicts"] if c["project"] == "audio")
    assert audio["policy_version"] == 1
    assert "TRACE fills the disks" in audio["problems"][0]["message"]
    assert SECRET not in json.dumps(body)


@pytest.mark.usefixtures("projects")
def test_a_platform_policy_nothing_conflicts_with_says_so(client: FlaskClient) -> None:
    assert put(client, "/api/v1/policy", defaults=[{"name": "LR", "value": "0.1"}])[
        "project_conflicts"] == []


@pytest.mark.usefixtures("projects")
def test_the_audit_entry_names_projects_and_variables_never_values(client: FlaskClient) -> None:
    put(client, "/api/v1/policy", **TIGHTER)
    entry = next(e for e in client.get("/api/v1/audit").get_json()["items"]
                 if e["action"] == "policy.put")
    assert entry["detail"]["project_conflicts"] == [
        {"project": "audio", "variables": ["NCCL_DEBUG"]},
        {"project": "vision", "variables": ["DATASET_ROOT"]},
    ]
    logged = json.dumps(entry)
    for value in ("TRACE", "/data/vision", SECRET):
        assert value not in logged


@pytest.mark.usefixtures("projects")
def test_a_project_policy_says_what_the_current_platform_policy_refuses_in_it(
        client: FlaskClient, client_for: Callable[..., FlaskClient]) -> None:
    carol = client_for("carol")
    before = carol.get("/api/v1/projects/audio/policy").get_json()
    assert before["conflicts"] == []
    put(client, "/api/v1/policy", **TIGHTER)
    after = carol.get("/api/v1/projects/audio/policy").get_json()
    assert [(p["variable"], p["rule"]) for p in after["conflicts"]] == [
        ("NCCL_DEBUG", "rule.allowed")]
    assert carol.get("/api/v1/projects/speech/policy").get_json()["conflicts"] == []
    put(carol, "/api/v1/projects/audio/policy", defaults=[{"name": "NCCL_DEBUG", "value": "WARN"}])
    assert carol.get("/api/v1/projects/audio/policy").get_json()["conflicts"] == []


def test_a_secret_project_default_is_never_shown_in_a_conflict(
        client: FlaskClient, browser: Callable[..., Browser]) -> None:
    """A secret default under a name the platform comes to protect, and under a rule its
    value breaks: the conflict names the variable; the value appears nowhere."""
    client.post("/api/v1/projects", json={"name": "vision"})
    put(client, "/api/v1/projects/vision/policy", defaults=[
        {"name": "WANDB_API_KEY", "value": SECRET, "secret": True},
        {"name": "HF_TOKEN", "value": SECRET, "secret": True}])
    saved = put(client, "/api/v1/policy", protected=[
        {"name": "HF_TOKEN", "reason": "the platform's token only"}],
        rules=[{"name": "WANDB_API_KEY", "max_length": 4, "pattern": "[0-9]+"}])
    assert conflicts_by_project(saved) == {"vision": [("HF_TOKEN", "layer.platform_protected")]}
    shown = [saved, client.get("/api/v1/projects/vision/policy").get_json(),
             client.get("/api/v1/audit").get_json()]
    for body in shown:
        assert SECRET not in json.dumps(body)
    page = browser()
    for path in ("/ui/policy", "/ui/projects/vision/policy"):
        text = page.get(path).text
        assert "HF_TOKEN" in text and SECRET not in text


class NoTasks:
    """Saving a platform policy must not look at a single task."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the save read the task store ({name})")


@pytest.mark.usefixtures("projects")
def test_checking_the_projects_reads_no_task(app: Flask,
                                             create_task: Callable[..., str]) -> None:
    create_task()
    services = dataclasses.replace(app.extensions["taskenv"], tasks=NoTasks())
    policy, conflicts = actions.save_policy(services, TIGHTER, "admin")
    assert policy.version == 1
    assert [c.project for c in conflicts] == ["audio", "vision"]


def test_the_openapi_document_states_both_fields(client: FlaskClient) -> None:
    spec = client.get("/api/v1/openapi.json").get_json()
    schemas = spec["components"]["schemas"]
    saved = spec["paths"]["/api/v1/policy"]["put"]["responses"]["200"]["content"][
        "application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    assert "project_conflicts" in schemas[saved]["properties"]
    conflict = schemas["ProjectConflictOut"]["properties"]
    assert {"project", "policy_version", "problems"} <= set(conflict)
    shown = spec["paths"]["/api/v1/projects/{name}/policy"]["get"]["responses"]["200"][
        "content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    assert "conflicts" in schemas[shown]["properties"]


@pytest.mark.usefixtures("projects")
def test_console_save_shows_the_projects_in_conflict_with_links(
        browser: Callable[..., Browser]) -> None:
    admin = browser()
    form = {"protected-0-name": "DATASET_ROOT", "protected-0-value": "/shared/data",
            "protected-0-reason": "one dataset root", "on_conflict": "reject",
            "rules": json.dumps(TIGHTER["rules"])}
    saved = admin.post("/ui/policy", form)
    assert saved.status_code == 302, saved.text
    page = admin.get(saved.location).text
    assert "Policy version 1 saved" in page
    assert "2 project policies now conflict with it" in page
    assert "audio (NCCL_DEBUG); vision (DATASET_ROOT)" in page
    assert "Project policies in conflict with this policy" in page
    assert 'href="/ui/projects/audio/policy"' in page
    assert 'href="/ui/projects/vision/policy"' in page
    assert "/ui/projects/speech/policy" not in page
    maintainer = browser("carol").get("/ui/projects/vision/policy").text
    assert "The platform policy now refuses parts of this policy" in maintainer
    assert "layer.platform_protected" in maintainer
    assert SECRET not in page + maintainer
