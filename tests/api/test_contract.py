"""The API's contract on fakeredis: RFC 3339 times, a public OpenAPI document, an ETag
that follows what GET answers, and If-Match that keeps comparing revisions."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from shared.store.tasks import TaskStore
from shared.task import states
from shared.timestamps import parse

TASKS = "/api/v1/tasks"
RFC3339_Z = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$"
CreateTask = Callable[..., str]


def times_in(body: Any, path: str = "") -> dict[str, Any]:
    """Every field of a JSON answer whose name says it is a moment."""
    found: dict[str, Any] = {}
    if isinstance(body, dict):
        for key, value in body.items():
            if key.endswith("_at") or key == "at":
                found[f"{path}.{key}"] = value
            found.update(times_in(value, f"{path}.{key}"))
    elif isinstance(body, list):
        for index, item in enumerate(body):
            found.update(times_in(item, f"{path}[{index}]"))
    return found


def test_every_time_in_every_answer_is_rfc3339_with_a_zone(
        client: FlaskClient, create_task: CreateTask, move_to: Callable[[str, str], None]):
    task_id = create_task()
    move_to(task_id, states.RUNNING)
    client.post(f"{TASKS}/{task_id}/cancel")
    client.put("/api/v1/policy", json={"defaults": [], "protected": []})
    client.post("/api/v1/projects", json={"name": "vision"})
    answers = {path: client.get(path).get_json() for path in (
        f"{TASKS}/{task_id}", TASKS, f"{TASKS}/{task_id}/revisions",
        f"{TASKS}/{task_id}/revisions/1", "/api/v1/policy", "/api/v1/policy/versions/1",
        "/api/v1/tokens", "/api/v1/audit", "/api/v1/projects")}
    found = {f"{path}{key}": value for path, body in answers.items()
             for key, value in times_in(body).items() if value is not None}

    kinds = {key.rsplit(".", 1)[1] for key in found}
    assert {"created_at", "updated_at", "at", "made_at", "started_at", "ended_at",
            "cancelled_at"} <= kinds, kinds
    for key, value in found.items():
        assert isinstance(value, str), (key, value)
        assert parse(value).utcoffset() is not None, key
    assert all(re.match(RFC3339_Z, v) for v in found.values()), found


def test_the_openapi_document_says_times_are_date_time_strings(app: Flask):
    spec = app.test_client().get("/api/v1/openapi.json").get_json()
    schemas = spec["components"]["schemas"]
    created = schemas["TaskOut"]["properties"]["created_at"]
    assert (created["type"], created["format"]) == ("string", "date-time")
    assert "RFC 3339" in created["description"]
    floats = [(name, field) for name, schema in schemas.items()
              for field, prop in (schema.get("properties") or {}).items()
              if field.endswith("_at") and prop.get("type") == "number"]
    assert floats == []


def test_the_openapi_document_needs_no_token_and_nothing_else_opens(app: Flask,
                                                                     create_task: CreateTask):
    task_id = create_task()
    anonymous = app.test_client()
    spec = anonymous.get("/api/v1/openapi.json")
    assert spec.status_code == 200
    assert spec.get_json()["info"]["title"] == "taskenv"
    assert anonymous.get(TASKS).status_code == 401
    assert anonymous.get(f"{TASKS}/{task_id}").status_code == 401


def etag_of(client: FlaskClient, task_id: str, **headers: str) -> Any:
    return client.get(f"{TASKS}/{task_id}", headers=headers)


def test_the_etag_changes_with_each_state_of_one_revision(
        client: FlaskClient, create_task: CreateTask, tasks: TaskStore):
    task_id = create_task()
    seen = []
    for old, new in [(states.PENDING, states.VALIDATED), (states.VALIDATED, states.RESOLVED),
                     (states.RESOLVED, states.LAUNCHING), (states.LAUNCHING, states.RUNNING),
                     (states.RUNNING, states.SUCCEEDED)]:
        seen.append(etag_of(client, task_id).headers["ETag"])
        assert tasks.transition(task_id, 1, old, new) is not None
    seen.append(etag_of(client, task_id).headers["ETag"])

    assert len(set(seen)) == len(seen), seen
    assert all(tag.startswith('"1-') for tag in seen)


def test_if_none_match_is_304_until_something_changes(
        client: FlaskClient, create_task: CreateTask, tasks: TaskStore):
    task_id = create_task()
    tag = etag_of(client, task_id).headers["ETag"]

    same = etag_of(client, task_id, **{"If-None-Match": tag})
    weak = etag_of(client, task_id, **{"If-None-Match": f"W/{tag}"})
    tasks.transition(task_id, 1, states.PENDING, states.VALIDATED)
    moved = etag_of(client, task_id, **{"If-None-Match": tag})

    assert same.status_code == weak.status_code == 304
    assert same.get_data() == b"" and same.headers["ETag"] == tag
    assert moved.status_code == 200 and moved.headers["ETag"] != tag
    assert moved.get_json()["status"] == "validated"


def test_if_none_match_is_per_reader_a_stranger_still_gets_404(
        client: FlaskClient, create_task: CreateTask,
        client_for: Callable[..., FlaskClient]):
    task_id = create_task()
    tag = etag_of(client, task_id).headers["ETag"]
    assert etag_of(client_for("mallory"), task_id, **{"If-None-Match": tag}).status_code == 404


def test_if_match_takes_the_etag_and_compares_only_the_revision(
        client: FlaskClient, create_task: CreateTask, tasks: TaskStore):
    """The workers move a task from pending to validated on their own: a change made
    against the ETag read before that is not stale; one made before a new revision is."""
    task_id = create_task()
    tag = etag_of(client, task_id).headers["ETag"]
    tasks.transition(task_id, 1, states.PENDING, states.REJECTED)
    body = {"set": [{"name": "LEARNING_RATE", "value": "0.5"}]}

    changed = client.patch(f"{TASKS}/{task_id}/env", json=body, headers={"If-Match": tag})
    stale = client.patch(f"{TASKS}/{task_id}/env", json=body, headers={"If-Match": tag})

    assert changed.status_code == 202, changed.get_json()
    assert stale.status_code == 412
    assert stale.get_json()["revision"] == 2
    assert client.patch(f"{TASKS}/{task_id}/env", json=body,
                        headers={"If-Match": '"2"'}).status_code == 202


@pytest.mark.parametrize("tag", ['"1-nothex"', '"1-abc"', "yesterday", '"-1"'])
def test_an_if_match_that_is_no_revision_or_etag_is_400(client: FlaskClient,
                                                        create_task: CreateTask, tag: str):
    task_id = create_task()
    response = client.post(f"{TASKS}/{task_id}/cancel", headers={"If-Match": tag})
    assert response.status_code == 400
    assert "If-Match" in response.get_json()["message"]


def test_logs_from_an_offset_give_only_what_came_after_and_where_to_go_on(
        client: FlaskClient, create_task: CreateTask, tasks: TaskStore):
    task_id = create_task()
    tasks.append_log(task_id, 1, "first line ✓\n")
    first = client.get(f"{TASKS}/{task_id}/logs?offset=0")
    tasks.append_log(task_id, 1, "second line\n")
    second = client.get(f"{TASKS}/{task_id}/logs?offset={first.headers['Log-Offset']}")
    nothing = client.get(f"{TASKS}/{task_id}/logs?offset={second.headers['Log-Offset']}")
    whole = client.get(f"{TASKS}/{task_id}/logs")

    assert first.text == "first line ✓\n"
    assert int(first.headers["Log-Offset"]) == len("first line ✓\n".encode())
    assert second.text == "second line\n" and second.headers["Log-Skipped"] == "0"
    assert nothing.text == "" and nothing.headers["Log-Offset"] == second.headers["Log-Offset"]
    assert whole.text == first.text + second.text and "Log-Offset" not in whole.headers


@pytest.mark.parametrize("offset", ["-1", "x", "1.5", "9" * 20])
def test_an_offset_that_is_no_byte_count_is_400(client: FlaskClient, create_task: CreateTask,
                                                offset: str):
    task_id = create_task()
    response = client.get(f"{TASKS}/{task_id}/logs", query_string={"offset": offset})
    assert response.status_code == 400
    assert "offset" in response.get_json()["message"]


def test_a_stranger_cannot_follow_anothers_log_from_an_offset(
        client: FlaskClient, create_task: CreateTask, tasks: TaskStore,
        client_for: Callable[..., FlaskClient]):
    task_id = create_task()
    tasks.append_log(task_id, 1, "private output\n")
    mallory = client_for("mallory")

    for offset in ("0", "3"):
        response = mallory.get(f"{TASKS}/{task_id}/logs?offset={offset}")
        assert response.status_code == 404
        assert "private" not in response.get_data(as_text=True)
        assert "Log-Offset" not in response.headers
