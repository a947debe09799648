"""/api/v1/tasks: create, read, list, change the env, rerun, logs; plus health and OpenAPI."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import fakeredis
import pytest
from flask.testing import FlaskClient

from shared.env.envlist import EnvVar, Limits
from shared.policy.model import Policy
from shared.policy.store import PolicyStore
from shared.store.tasks import TaskStore
from shared.task import states
from workers import stages

TASKS = "/api/v1/tasks"

CreateTask = Callable[..., str]
MoveTo = Callable[[str, str], None]
ErrorShape = Callable[..., None]


def body(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"name": "resnet", "steps": [["python3", "train.py"]],
                            "env": [{"name": "LEARNING_RATE", "value": "0.01"}]}
    data.update(changes)
    return data


def task_keys(r: fakeredis.FakeRedis) -> list[str]:
    """Task records (one hash per task), not their revisions or logs."""
    return [k for k in r.keys("taskenv:task:*") if k.count(":") == 2]


def get_task(client: FlaskClient, task_id: str) -> dict[str, Any]:
    response = client.get(f"{TASKS}/{task_id}")
    assert response.status_code == 200, response.get_json()
    return response.get_json()


# --- create ------------------------------------------------------------------------------

def test_create_answers_202_with_id_url_and_location(client: FlaskClient) -> None:
    response = client.post(TASKS, json=body())
    assert response.status_code == 202
    data = response.get_json()
    assert data["id"]
    assert data["url"] == f"{TASKS}/{data['id']}"
    assert response.headers["Location"].endswith(data["url"])
    assert (data["revision"], data["status"]) == (1, states.PENDING)


def test_the_record_is_in_redis_before_it_is_enqueued(client: FlaskClient,
                                                      enqueued: Any) -> None:
    task_id = client.post(TASKS, json=body()).get_json()["id"]
    assert enqueued.calls == [(task_id, 1)]
    [seen] = enqueued.records_seen
    assert seen is not None and seen["id"] == task_id and seen["state"] == states.PENDING


def test_create_stores_what_was_sent(client: FlaskClient, tasks: TaskStore) -> None:
    env = [{"name": "DATA", "value": "数据/路径 $(HOME) `id`;x\ny", "secret": False}]
    task_id = client.post(TASKS, json=body(env=env, workdir="runs/1")).get_json()["id"]
    doc = tasks.get(task_id)
    assert doc["env"] == env
    assert doc["steps"] == [["python3", "train.py"]]
    assert doc["workdir"] == "runs/1" and doc["owner"] == "admin"


def test_env_rules_are_checked_by_the_worker_not_the_api(client: FlaskClient,
                                                         enqueued: Any) -> None:
    response = client.post(TASKS, json=body(env=[{"name": "1BAD", "value": "x"}]))
    assert response.status_code == 202
    assert len(enqueued.calls) == 1


def test_idempotency_key_returns_the_same_task_and_enqueues_once(
        client: FlaskClient, enqueued: Any, redis_client: fakeredis.FakeRedis) -> None:
    headers = {"Idempotency-Key": "retry-me"}
    first = client.post(TASKS, json=body(), headers=headers)
    second = client.post(TASKS, json=body(), headers=headers)
    assert first.status_code == second.status_code == 202
    assert first.get_json()["id"] == second.get_json()["id"]
    assert first.headers["Location"] == second.headers["Location"]
    assert len(enqueued.calls) == 1
    assert len(task_keys(redis_client)) == 1


def test_idempotency_key_reused_for_another_body_is_a_conflict(
        client: FlaskClient, enqueued: Any, error_shape: ErrorShape) -> None:
    headers = {"Idempotency-Key": "k1"}
    client.post(TASKS, json=body(), headers=headers)
    response = client.post(TASKS, json=body(name="another"), headers=headers)
    assert response.status_code == 409
    error_shape(response.get_json(), "conflict")
    assert "k1" in response.get_json()["message"]
    assert len(enqueued.calls) == 1


def test_different_idempotency_keys_make_different_tasks(client: FlaskClient) -> None:
    a = client.post(TASKS, json=body(), headers={"Idempotency-Key": "a"}).get_json()["id"]
    b = client.post(TASKS, json=body(), headers={"Idempotency-Key": "b"}).get_json()["id"]
    assert a != b


def test_overlong_idempotency_key_is_a_bad_request(client: FlaskClient,
                                                   error_shape: ErrorShape) -> None:
    response = client.post(TASKS, json=body(), headers={"Idempotency-Key": "k" * 201})
    assert response.status_code == 400
    error_shape(response.get_json(), "bad_request")


MALFORMED = {
    "unknown field": (body(bogus=1), "bogus"),
    "steps not a list": (body(steps="python3 train.py"), "steps"),
    "step not a list": (body(steps=["python3 train.py"]), "steps.0"),
    "no steps": (body(steps=[]), "steps"),
    "empty step": (body(steps=[[]]), "steps.0"),
    "missing name": ({"steps": [["true"]]}, "name"),
    "empty name": (body(name=""), "name"),
    "env not a list": (body(env={"A": "1"}), "env"),
    "env entry without value": (body(env=[{"name": "A"}]), "env.0.value"),
    "unknown env field": (body(env=[{"name": "A", "value": "1", "x": 1}]), "env.0.x"),
    "gpus negative": (body(resources={"gpus": -1}), "resources.gpus"),
}


@pytest.mark.parametrize("data, field", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_body_is_422_naming_the_field(
        client: FlaskClient, enqueued: Any, redis_client: fakeredis.FakeRedis,
        error_shape: ErrorShape, data: dict[str, Any], field: str) -> None:
    response = client.post(TASKS, json=data)
    assert response.status_code == 422
    error_shape(response.get_json())
    assert field in [p.get("field") for p in response.get_json()["errors"]]
    assert all(p["rule"] == "schema" for p in response.get_json()["errors"])
    assert enqueued.calls == [] and task_keys(redis_client) == []


def test_body_that_is_not_an_object_is_422(client: FlaskClient, error_shape: ErrorShape) -> None:
    response = client.post(TASKS, json=["name", "steps"])
    assert response.status_code == 422
    error_shape(response.get_json())


def test_body_that_is_not_json_is_400(client: FlaskClient, enqueued: Any,
                                      error_shape: ErrorShape) -> None:
    response = client.post(TASKS, data="{not json", content_type="application/json")
    assert response.status_code == 400
    error_shape(response.get_json())
    assert enqueued.calls == []


def test_all_schema_problems_are_reported_at_once(client: FlaskClient) -> None:
    response = client.post(TASKS, json={"steps": "x", "bogus": 1})
    fields = {p.get("field") for p in response.get_json()["errors"]}
    assert {"name", "steps", "bogus"} <= fields


def test_body_over_the_size_limit_is_413(admin_client_with: Callable[..., FlaskClient],
                                         enqueued: Any, error_shape: ErrorShape) -> None:
    response = admin_client_with(max_request_bytes=1000).post(TASKS, json=body(name="x" * 150,
                                                       env=[{"name": "A", "value": "v" * 2000}]))
    assert response.status_code == 413
    error_shape(response.get_json())
    assert enqueued.calls == []


# --- read --------------------------------------------------------------------------------

def test_get_shows_the_task(client: FlaskClient, create_task: CreateTask) -> None:
    task_id = create_task()
    task = get_task(client, task_id)
    assert task["id"] == task_id and task["url"] == f"{TASKS}/{task_id}"
    assert task["status"] == states.PENDING and task["revision"] == 1
    assert task["env"] == [{"name": "LEARNING_RATE", "value": "0.01", "secret": False}]
    assert task["resolved_env"] is None
    assert "new revision" in task["note"]


def test_get_shows_the_resolved_env_with_sources(client: FlaskClient, create_task: CreateTask,
                                                 tasks: TaskStore,
                                                 policies: PolicyStore) -> None:
    policies.put(Policy(defaults=(EnvVar("NCCL_DEBUG", "WARN"),)))
    task_id = create_task()
    stages.validate(tasks, Limits(), task_id, 1)
    stages.apply_policy(tasks, policies, task_id, 1)
    task = get_task(client, task_id)
    sources = {v["name"]: (v["source"], v["overrode"]) for v in task["resolved_env"]}
    assert sources["NCCL_DEBUG"] == ("default", [])
    assert sources["LEARNING_RATE"] == ("user", [])
    assert sources["TASK_ID"] == ("platform", [])
    assert task["policy_version"] == 1 and task["status"] == states.RESOLVED


def test_unknown_task_is_404_in_the_error_shape(client: FlaskClient,
                                                error_shape: ErrorShape) -> None:
    for response in (client.get(f"{TASKS}/nope"), client.get(f"{TASKS}/nope/logs"),
                     client.patch(f"{TASKS}/nope/env", json={"unset": ["A"]}),
                     client.post(f"{TASKS}/nope/rerun")):
        assert response.status_code == 404
        error_shape(response.get_json(), "not_found")


def test_unknown_url_is_404_in_the_error_shape(client: FlaskClient,
                                               error_shape: ErrorShape) -> None:
    response = client.get("/api/v1/nothing-here")
    assert response.status_code == 404
    error_shape(response.get_json())


def test_someone_elses_task_does_not_exist_for_you(client_for: Callable[..., FlaskClient],
                                                   enqueued: Any) -> None:
    alice, bob = client_for("alice"), client_for("bob")
    task_id = alice.post(TASKS, json=body()).get_json()["id"]
    assert get_task(alice, task_id)["owner"] == "alice"
    assert bob.get(f"{TASKS}/{task_id}").status_code == 404
    assert bob.get(f"{TASKS}/{task_id}/logs").status_code == 404
    assert bob.post(f"{TASKS}/{task_id}/rerun").status_code == 404
    assert bob.patch(f"{TASKS}/{task_id}/env", json={"unset": ["LEARNING_RATE"]}).status_code \
        == 404
    assert bob.get(TASKS).get_json()["items"] == []
    assert [t["id"] for t in alice.get(TASKS).get_json()["items"]] == [task_id]
    assert len(enqueued.calls) == 1


def test_an_admin_sees_every_owners_tasks(client: FlaskClient,
                                          client_for: Callable[..., FlaskClient]) -> None:
    task_id = client_for("alice").post(TASKS, json=body()).get_json()["id"]
    assert get_task(client, task_id)["owner"] == "alice"
    assert [t["id"] for t in client.get(TASKS).get_json()["items"]] == [task_id]


def test_requests_without_a_token_are_401(app: Any, error_shape: ErrorShape) -> None:
    response = app.test_client().post(TASKS, json=body())
    assert response.status_code == 401
    error_shape(response.get_json(), "unauthorized")


# --- list --------------------------------------------------------------------------------

def list_ids(client: FlaskClient, query: str = "") -> tuple[list[str], int | None]:
    response = client.get(f"{TASKS}{query}")
    assert response.status_code == 200, response.get_json()
    data = response.get_json()
    return [t["id"] for t in data["items"]], data["next_cursor"]


def test_list_is_newest_first_and_pages_with_cursors(client: FlaskClient,
                                                     create_task: CreateTask) -> None:
    created = [create_task(name=f"t{i}") for i in range(5)]
    seen, cursor, pages = [], None, 0
    while True:
        query = "?limit=2" + (f"&cursor={cursor}" if cursor is not None else "")
        page, cursor = list_ids(client, query)
        assert len(page) <= 2
        seen += page
        pages += 1
        if cursor is None:
            break
    assert pages == 3
    assert seen == list(reversed(created))


def test_list_filters_by_status(client: FlaskClient, create_task: CreateTask,
                                move_to: MoveTo) -> None:
    created = [create_task() for _ in range(4)]
    move_to(created[1], states.REJECTED)
    move_to(created[3], states.RUNNING)
    assert list_ids(client, "?status=rejected")[0] == [created[1]]
    assert list_ids(client, "?status=running")[0] == [created[3]]
    assert list_ids(client, "?status=pending")[0] == [created[2], created[0]]
    assert list_ids(client, "?status=succeeded")[0] == []


def test_list_items_are_summaries_of_the_task(client: FlaskClient,
                                              create_task: CreateTask) -> None:
    task_id = create_task()
    [item] = client.get(TASKS).get_json()["items"]
    whole = get_task(client, task_id)
    assert item == {k: whole[k] for k in ("id", "url", "name", "owner", "status", "revision",
                                          "created_at", "updated_at")} | {"project": None}
    assert "env" not in item  # a listing never carries env: its size is bounded


@pytest.mark.parametrize("query", ["?status=sleeping", "?limit=0", "?limit=501", "?limit=ten"])
def test_list_with_bad_parameters_is_422(client: FlaskClient, error_shape: ErrorShape,
                                         query: str) -> None:
    response = client.get(f"{TASKS}{query}")
    assert response.status_code == 422
    error_shape(response.get_json())


# --- logs --------------------------------------------------------------------------------

def test_logs_are_plain_text_for_the_current_or_a_given_revision(
        client: FlaskClient, create_task: CreateTask, tasks: TaskStore, move_to: MoveTo) -> None:
    task_id = create_task()
    tasks.append_log(task_id, 1, "epoch 1 loss 0.5\n数据\n")
    move_to(task_id, states.FAILED)
    client.post(f"{TASKS}/{task_id}/rerun")
    tasks.append_log(task_id, 2, "second run\n")
    current = client.get(f"{TASKS}/{task_id}/logs")
    assert current.status_code == 200
    assert current.mimetype == "text/plain"
    assert current.get_data(as_text=True) == "second run\n"
    first = client.get(f"{TASKS}/{task_id}/logs?revision=1")
    assert first.get_data(as_text=True) == "epoch 1 loss 0.5\n数据\n"
    for missing in (3, -1):  # no such revision: not the empty text of a silent revision
        response = client.get(f"{TASKS}/{task_id}/logs?revision={missing}")
        assert response.status_code == 404
        assert response.get_json()["message"] == f"task {task_id} has no revision {missing}"


@pytest.mark.parametrize("query", ["replica=abc", "replica=1.5", "revision=two", "replica="])
def test_a_log_query_that_is_no_number_is_a_400_naming_it(
        client: FlaskClient, create_task: CreateTask, tasks: TaskStore, query: str) -> None:
    task_id = create_task()
    tasks.append_log(task_id, 1, "the whole log\n")
    response = client.get(f"{TASKS}/{task_id}/logs?{query}")
    assert response.status_code == 400, response.get_data(as_text=True)
    assert f"{query.split('=')[0]} must be a whole number" in response.get_json()["message"]


def test_logs_of_a_task_without_output_are_empty(client: FlaskClient,
                                                 create_task: CreateTask) -> None:
    response = client.get(f"{TASKS}/{create_task()}/logs")
    assert response.status_code == 200 and response.get_data(as_text=True) == ""


# --- change the env ----------------------------------------------------------------------

def test_patch_makes_revision_two_and_enqueues_it(client: FlaskClient, create_task: CreateTask,
                                                  tasks: TaskStore, move_to: MoveTo,
                                                  enqueued: Any) -> None:
    task_id = create_task(env=[{"name": "A", "value": "1"}, {"name": "B", "value": "2"}])
    move_to(task_id, states.SUCCEEDED)
    response = client.patch(f"{TASKS}/{task_id}/env",
                            json={"set": [{"name": "B", "value": "two"},
                                          {"name": "C", "value": "3"}], "unset": ["A"]})
    assert response.status_code == 202
    assert response.get_json()["revision"] == 2
    assert response.get_json()["status"] == states.PENDING
    assert response.headers["Location"].endswith(f"{TASKS}/{task_id}")
    assert enqueued.calls[-1] == (task_id, 2)
    assert enqueued.records_seen[-1]["revision"] == 2
    doc = tasks.get(task_id)
    assert doc["env"] == [{"name": "B", "value": "two", "secret": False},
                          {"name": "C", "value": "3", "secret": False}]
    assert tasks.revision(task_id, 1)["state"] == states.SUCCEEDED
    assert get_task(client, task_id)["revision"] == 2


@pytest.mark.parametrize("state", [states.REJECTED, states.FAILED, states.SUCCEEDED])
def test_patch_is_allowed_once_the_task_has_finished(client: FlaskClient,
                                                     create_task: CreateTask, move_to: MoveTo,
                                                     state: str) -> None:
    task_id = create_task()
    move_to(task_id, state)
    response = client.patch(f"{TASKS}/{task_id}/env",
                            json={"set": [{"name": "X", "value": "1"}]})
    assert response.status_code == 202


@pytest.mark.parametrize("state", [states.LAUNCHING, states.RUNNING])
def test_patch_of_a_running_task_restarts_it_by_default(
        client: FlaskClient, create_task: CreateTask, move_to: MoveTo, tasks: TaskStore,
        enqueued: Any, app: Any, state: str) -> None:
    sent: list[tuple[str, str, int]] = []
    app.extensions["taskenv"].send = lambda *message: sent.append(message)
    task_id = create_task()
    move_to(task_id, state)
    response = client.patch(f"{TASKS}/{task_id}/env",
                            json={"set": [{"name": "X", "value": "1"}]})
    assert response.status_code == 202
    assert tasks.get(task_id)["revision"] == 2
    assert tasks.revision(task_id, 1)["state"] == states.CANCELLED
    # Revision 2 waits for revision 1 to stop: the launch workers enqueue it then.
    assert len(enqueued.calls) == 1 and sent == [("cancel", task_id, 1)]


def test_patch_unsetting_an_unknown_name_is_422_naming_it(
        client: FlaskClient, create_task: CreateTask, move_to: MoveTo, tasks: TaskStore,
        enqueued: Any, error_shape: ErrorShape) -> None:
    task_id = create_task()
    move_to(task_id, states.SUCCEEDED)
    response = client.patch(f"{TASKS}/{task_id}/env", json={"unset": ["NOT_THERE"]})
    assert response.status_code == 422
    error_shape(response.get_json(), "env_invalid")
    [problem] = response.get_json()["errors"]
    assert problem["variable"] == "NOT_THERE" and problem["rule"] == "name.unknown"
    assert tasks.get(task_id)["revision"] == 1
    assert len(enqueued.calls) == 1


def test_patch_setting_and_unsetting_one_name_is_422(client: FlaskClient,
                                                     create_task: CreateTask,
                                                     move_to: MoveTo) -> None:
    task_id = create_task()
    move_to(task_id, states.SUCCEEDED)
    response = client.patch(f"{TASKS}/{task_id}/env",
                            json={"set": [{"name": "LEARNING_RATE", "value": "1"}],
                                  "unset": ["LEARNING_RATE"]})
    assert response.status_code == 422
    assert [p["rule"] for p in response.get_json()["errors"]] == ["patch.ambiguous"]


def test_patch_with_a_malformed_body_is_422(client: FlaskClient, create_task: CreateTask,
                                            error_shape: ErrorShape) -> None:
    response = client.patch(f"{TASKS}/{create_task()}/env", json={"set": {"A": "1"}})
    assert response.status_code == 422
    error_shape(response.get_json())


def test_patch_with_a_non_string_name_is_not_a_server_error(
        client: FlaskClient, create_task: CreateTask, move_to: MoveTo,
        error_shape: ErrorShape) -> None:
    task_id = create_task()
    move_to(task_id, states.SUCCEEDED)
    response = client.patch(f"{TASKS}/{task_id}/env",
                            json={"set": [{"name": ["A"], "value": "1"}]})
    assert response.status_code in (202, 422)
    if response.status_code == 422:
        error_shape(response.get_json())


def test_a_non_string_name_is_refused_by_the_schema_naming_the_field(
        client: FlaskClient, error_shape: ErrorShape) -> None:
    response = client.post(TASKS, json={"name": "t", "steps": [["true"]],
                                        "env": [{"name": ["A"], "value": "1"}]})
    assert response.status_code == 422
    body = response.get_json()
    error_shape(body, "unprocessable_entity")
    assert [e["field"] for e in body["errors"]] == ["env.0.name"]


def test_rerun_makes_a_new_revision_with_the_same_env(client: FlaskClient,
                                                      create_task: CreateTask,
                                                      move_to: MoveTo, tasks: TaskStore,
                                                      enqueued: Any) -> None:
    task_id = create_task()
    move_to(task_id, states.FAILED)
    env_before = tasks.get(task_id)["env"]
    response = client.post(f"{TASKS}/{task_id}/rerun")
    assert response.status_code == 202
    assert response.get_json()["revision"] == 2
    assert enqueued.calls[-1] == (task_id, 2)
    assert tasks.get(task_id)["env"] == env_before


def test_rerun_of_a_running_task_restarts_it(client: FlaskClient, create_task: CreateTask,
                                             move_to: MoveTo, app: Any,
                                             tasks: TaskStore) -> None:
    sent: list[tuple[str, str, int]] = []
    app.extensions["taskenv"].send = lambda *message: sent.append(message)
    task_id = create_task()
    move_to(task_id, states.RUNNING)
    response = client.post(f"{TASKS}/{task_id}/rerun")
    assert response.status_code == 202
    assert tasks.get(task_id)["how"] == "restart" and sent == [("cancel", task_id, 1)]


# --- health and the API document ---------------------------------------------------------

def test_openapi_document_lists_every_path(app: Any, client: FlaskClient) -> None:
    response = client.get("/api/v1/openapi.json")
    assert response.status_code == 200
    routes = {re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", rule.rule) for rule in app.url_map.iter_rules()
              if rule.rule.startswith("/api/v1/") and not rule.rule.endswith("openapi.json")}
    assert {"/api/v1/tasks", "/api/v1/tasks/{task_id}", "/api/v1/tasks/{task_id}/env",
            "/api/v1/tasks/{task_id}/rerun", "/api/v1/tasks/{task_id}/logs",
            "/api/v1/policy", "/api/v1/policy/versions", "/api/v1/policy/versions/{version}",
            "/api/v1/env/preview"} <= routes
    assert set(response.get_json()["paths"]) == routes


# --- secrets -----------------------------------------------------------------------------

SECRETS = {"USER_TOKEN": "user-secret-4b1d", "DB_PASSWORD": "default-secret-9c2e",
           "REGISTRY_KEY": "protected-secret-7f3a", "PATCHED_TOKEN": "patched-secret-1a8d"}


def test_secret_values_never_appear_in_any_response(client: FlaskClient, tasks: TaskStore,
                                                    policies: PolicyStore,
                                                    move_to: MoveTo) -> None:
    responses = [client.put("/api/v1/policy", json={
        "defaults": [{"name": "DB_PASSWORD", "value": SECRETS["DB_PASSWORD"], "secret": True}],
        "protected": [{"name": "REGISTRY_KEY", "value": SECRETS["REGISTRY_KEY"],
                       "reason": "platform registry", "secret": True}]})]
    env = [{"name": "USER_TOKEN", "value": SECRETS["USER_TOKEN"], "secret": True}]
    created = client.post(TASKS, json=body(env=env), headers={"Idempotency-Key": "s"})
    task_id = created.get_json()["id"]
    responses += [created, client.post(TASKS, json=body(env=env),
                                       headers={"Idempotency-Key": "s"})]
    stages.validate(tasks, Limits(), task_id, 1)
    stages.apply_policy(tasks, policies, task_id, 1)
    resolved = {v["name"] for v in tasks.get(task_id)["resolved"]}
    assert {"USER_TOKEN", "DB_PASSWORD", "REGISTRY_KEY"} <= resolved  # they are in there
    responses += [client.get(f"{TASKS}/{task_id}"), client.get(TASKS),
                  client.get("/api/v1/policy"), client.get("/api/v1/policy/versions/1"),
                  client.post("/api/v1/env/preview", json={"env": env})]
    move_to(task_id, states.SUCCEEDED)
    responses.append(client.patch(f"{TASKS}/{task_id}/env", json={"set": [
        {"name": "PATCHED_TOKEN", "value": SECRETS["PATCHED_TOKEN"], "secret": True}]}))
    responses += [client.get(f"{TASKS}/{task_id}"), client.get(TASKS),
                  client.get("/api/v1/audit"),
                  client.put("/api/v1/policy", json={"protected": [
                      {"name": "BAD-NAME", "value": SECRETS["REGISTRY_KEY"] + "\x00",
                       "reason": "", "secret": True}]})]
    assert all(r.status_code < 500 for r in responses)
    for response in responses:
        raw = response.get_data()
        for value in SECRETS.values():
            assert value.encode() not in raw, (response.request.path, value)
