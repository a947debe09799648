"""Cancel, a running task's env change (restart or next run) and If-Match, on fakeredis."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from shared.store.tasks import TaskStore
from shared.task import states
from shared.timestamps import parse
from tests.api.conftest import EnqueueSpy

TASKS = "/api/v1/tasks"
CreateTask = Callable[..., str]
MoveTo = Callable[[str, str], None]
NOT_FINAL = [s for s in states.ALL if s not in states.FINAL]


class SendSpy:
    """Stands in for the Celery sender: the stage messages the API sent."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, int]] = []

    def __call__(self, stage: str, task_id: str, revision: int) -> None:
        self.calls.append((stage, task_id, revision))


@pytest.fixture
def sent(app: Flask) -> SendSpy:
    spy = SendSpy()
    app.extensions["taskenv"].send = spy
    return spy


def cancel(client: FlaskClient, task_id: str, **headers: str) -> Any:
    return client.post(f"{TASKS}/{task_id}/cancel", headers=headers)


def patch(client: FlaskClient, task_id: str, apply: str | None = None,
          **headers: str) -> Any:
    body: dict[str, Any] = {"set": [{"name": "LEARNING_RATE", "value": "0.5"}]}
    if apply is not None:
        body["apply"] = apply
    return client.patch(f"{TASKS}/{task_id}/env", json=body, headers=headers)


# --- cancel ------------------------------------------------------------------------------

@pytest.mark.parametrize("state", NOT_FINAL)
def test_cancel_from_every_state_not_final(client: FlaskClient, create_task: CreateTask,
                                           move_to: MoveTo, tasks: TaskStore, sent: SendSpy,
                                           state: str) -> None:
    task_id = create_task()
    move_to(task_id, state)
    response = cancel(client, task_id)
    assert response.status_code == 202, response.get_json()
    body = response.get_json()
    assert body["status"] == states.CANCELLED
    assert body["cancelled_by"] == "admin" and parse(body["cancelled_at"]).year >= 2026
    doc = tasks.get(task_id)
    assert doc["state"] == states.CANCELLED and doc["cancelled_by"] == "admin"
    assert tasks.revision(task_id, 1)["state"] == states.CANCELLED
    # Only a revision that may have a workload is handed to the launch workers to stop.
    expected = [("cancel", task_id, 1)] if state in states.LAUNCHED else []
    assert sent.calls == expected


def test_a_stage_finds_a_cancelled_task_elsewhere_and_does_nothing(
        client: FlaskClient, create_task: CreateTask, move_to: MoveTo, tasks: TaskStore,
        sent: SendSpy) -> None:
    task_id = create_task()
    move_to(task_id, states.RESOLVED)
    cancel(client, task_id)
    assert tasks.transition(task_id, 1, states.RESOLVED, states.LAUNCHING) is None
    assert tasks.get(task_id)["state"] == states.CANCELLED


def test_second_cancel_answers_200_with_the_same_state(client: FlaskClient,
                                                       create_task: CreateTask,
                                                       move_to: MoveTo, sent: SendSpy) -> None:
    task_id = create_task()
    move_to(task_id, states.RUNNING)
    first = cancel(client, task_id).get_json()
    again = cancel(client, task_id)
    assert again.status_code == 200
    assert again.get_json() == first
    assert len(sent.calls) == 1  # the stop is asked for once


@pytest.mark.parametrize("state", [states.SUCCEEDED, states.FAILED, states.REJECTED])
def test_cancelling_a_finished_task_is_409_naming_its_state(
        client: FlaskClient, create_task: CreateTask, move_to: MoveTo, sent: SendSpy,
        state: str) -> None:
    task_id = create_task()
    move_to(task_id, state)
    response = cancel(client, task_id)
    assert response.status_code == 409
    assert response.get_json()["code"] == "conflict"
    assert state in response.get_json()["message"]
    assert sent.calls == []


def test_cancel_of_someone_elses_task_is_404(client_for: Callable[..., FlaskClient],
                                            create_task: CreateTask, sent: SendSpy) -> None:
    task_id = create_task()
    assert cancel(client_for("mallory"), task_id).status_code == 404


def test_cancel_with_a_stale_if_match_is_412_with_the_current_revision(
        client: FlaskClient, create_task: CreateTask, tasks: TaskStore, sent: SendSpy) -> None:
    task_id = create_task()
    response = cancel(client, task_id, **{"If-Match": '"7"'})
    assert response.status_code == 412
    body = response.get_json()
    assert body["code"] == "precondition_failed" and body["revision"] == 1
    assert "ETag" not in response.headers  # no representation: the body names the revision
    assert tasks.get(task_id)["state"] == states.PENDING
    assert cancel(client, task_id, **{"If-Match": '"1"'}).status_code == 202


def test_a_malformed_if_match_is_400(client: FlaskClient, create_task: CreateTask) -> None:
    task_id = create_task()
    response = patch(client, task_id, **{"If-Match": "yesterday"})
    assert response.status_code == 400
    assert "If-Match" in response.get_json()["message"]


def test_get_gives_an_etag_that_starts_with_the_revision(client: FlaskClient,
                                                        create_task: CreateTask) -> None:
    task_id = create_task()
    response = client.get(f"{TASKS}/{task_id}")
    assert response.headers["ETag"].startswith('"1-')
    assert response.get_json()["next_env"] is None


# --- PATCH on a running task ----------------------------------------------------------------

@pytest.mark.parametrize("apply", [None, "restart"])
@pytest.mark.parametrize("state", sorted(states.LAUNCHED))
def test_restart_cancels_the_run_and_waits_for_it_to_stop(
        client: FlaskClient, create_task: CreateTask, move_to: MoveTo, tasks: TaskStore,
        enqueued: EnqueueSpy, sent: SendSpy, state: str, apply: str | None) -> None:
    task_id = create_task()
    move_to(task_id, state)
    response = patch(client, task_id, apply, **{"If-Match": "1"})
    assert response.status_code == 202, response.get_json()
    assert response.get_json()["revision"] == 2
    doc = tasks.get(task_id)
    assert (doc["state"], doc["apply"], doc["how"]) == (states.PENDING, "restart", "restart")
    assert {"name": "LEARNING_RATE", "value": "0.5", "secret": False} in doc["env"]
    old = tasks.revision(task_id, 1)
    assert old["state"] == states.CANCELLED and "revision 2" in old["reason"]
    # Not validated yet: the launch workers enqueue it once revision 1 is gone.
    assert enqueued.calls == [(task_id, 1)]
    assert sent.calls == [("cancel", task_id, 1)]


def test_a_change_while_a_restart_waits_replaces_the_waiting_revision(
        client: FlaskClient, create_task: CreateTask, move_to: MoveTo, tasks: TaskStore,
        enqueued: EnqueueSpy, sent: SendSpy) -> None:
    task_id = create_task()
    move_to(task_id, states.RUNNING)
    patch(client, task_id)
    response = client.patch(f"{TASKS}/{task_id}/env",
                            json={"set": [{"name": "BATCH", "value": "64"}]})
    assert response.status_code == 202, response.get_json()
    doc = tasks.get(task_id)
    # Revision 3 waits for revision 1's stop, as revision 2 did; neither is validated yet.
    assert (doc["revision"], doc["state"], doc["apply"], doc["replaces"]) == (
        3, states.PENDING, "restart", 1)
    assert {e["name"] for e in doc["env"]} >= {"LEARNING_RATE", "BATCH"}
    assert enqueued.calls == [(task_id, 1)]
    assert sent.calls == [("cancel", task_id, 1), ("cancel", task_id, 1)]


def test_a_change_racing_the_launch_restarts_the_task_instead_of_a_409(
        client: FlaskClient, create_task: CreateTask, move_to: MoveTo, tasks: TaskStore,
        sent: SendSpy, monkeypatch: pytest.MonkeyPatch) -> None:
    task_id = create_task()
    move_to(task_id, states.RESOLVED)
    update = tasks.update

    def launched_first(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(tasks, "update", update)  # once: the launch worker's claim
        assert tasks.transition(task_id, 1, states.RESOLVED, states.LAUNCHING) is not None
        return update(*args, **kwargs)

    monkeypatch.setattr(tasks, "update", launched_first)
    response = patch(client, task_id)
    assert response.status_code == 202, response.get_json()
    doc = tasks.get(task_id)
    assert (doc["revision"], doc["state"], doc["apply"]) == (2, states.PENDING, "restart")
    assert tasks.revision(task_id, 1)["state"] == states.CANCELLED
    assert sent.calls == [("cancel", task_id, 1)]


def test_next_run_keeps_the_change_and_the_run_carries_on(
        client: FlaskClient, create_task: CreateTask, move_to: MoveTo, tasks: TaskStore,
        enqueued: EnqueueSpy, sent: SendSpy) -> None:
    task_id = create_task()
    move_to(task_id, states.RUNNING)
    response = patch(client, task_id, "next-run")
    assert response.status_code == 202
    assert response.get_json() | {"url": None} == {"id": task_id, "url": None, "revision": 1,
                                                   "status": states.RUNNING, "advice": [],
                                                   "how": "create"}  # no new revision
    shown = client.get(f"{TASKS}/{task_id}").get_json()
    assert shown["status"] == states.RUNNING
    assert shown["next_env"] == [{"name": "LEARNING_RATE", "value": "0.5", "secret": False}]
    assert sent.calls == [] and enqueued.calls == [(task_id, 1)]
    # A second next-run change builds on the first.
    client.patch(f"{TASKS}/{task_id}/env", json={"set": [{"name": "B", "value": "2"}],
                                                  "apply": "next-run"})
    move_to(task_id, states.SUCCEEDED)
    rerun = client.post(f"{TASKS}/{task_id}/rerun")
    assert rerun.status_code == 202, rerun.get_json()
    doc = tasks.get(task_id)
    assert doc["revision"] == 2
    assert [(e["name"], e["value"]) for e in doc["env"]] == [("LEARNING_RATE", "0.5"),
                                                             ("B", "2")]
    assert doc.get("next_env") is None  # used up
    assert client.get(f"{TASKS}/{task_id}").get_json()["next_env"] is None


def test_next_env_secrets_are_sealed_in_redis_and_masked(
        client: FlaskClient, create_task: CreateTask, move_to: MoveTo, app: Flask,
        sent: SendSpy) -> None:
    task_id = create_task()
    move_to(task_id, states.RUNNING)
    client.patch(f"{TASKS}/{task_id}/env", json={
        "set": [{"name": "TOKEN", "value": "hunter2-very-secret", "secret": True}],
        "apply": "next-run"})
    redis_client = app.extensions["taskenv"].redis
    hashes = [k for k in redis_client.keys("*") if redis_client.type(k) == "hash"]
    dump = " ".join(str(redis_client.hgetall(k)) for k in hashes)
    assert "TOKEN" in dump and "hunter2-very-secret" not in dump
    shown = client.get(f"{TASKS}/{task_id}").get_json()["next_env"]
    assert "hunter2-very-secret" not in str(shown)


def test_patch_with_a_stale_if_match_is_412_and_changes_nothing(
        client: FlaskClient, create_task: CreateTask, move_to: MoveTo, tasks: TaskStore,
        sent: SendSpy) -> None:
    task_id = create_task()
    move_to(task_id, states.SUCCEEDED)
    assert patch(client, task_id, **{"If-Match": '"1"'}).status_code == 202
    response = patch(client, task_id, **{"If-Match": '"1"'})
    assert response.status_code == 412
    assert response.get_json()["revision"] == 2
    assert tasks.get(task_id)["revision"] == 2


def test_rerun_honours_if_match(client: FlaskClient, create_task: CreateTask, move_to: MoveTo,
                                sent: SendSpy) -> None:
    task_id = create_task()
    move_to(task_id, states.SUCCEEDED)
    response = client.post(f"{TASKS}/{task_id}/rerun", headers={"If-Match": '"3"'})
    assert response.status_code == 412


def test_apply_and_its_default_are_in_the_openapi_document(client: FlaskClient) -> None:
    spec = client.get("/api/v1/openapi.json").get_json()
    apply = spec["components"]["schemas"]["EnvPatch"]["properties"]["apply"]
    assert apply["default"] == "restart"
    assert apply["enum"] == ["restart", "next-run"]
    assert "/api/v1/tasks/{task_id}/cancel" in spec["paths"]
