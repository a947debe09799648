"""A task's resources and its argv, judged when it is created, as a plain user sends them."""

from __future__ import annotations

from collections.abc import Callable

from flask.testing import FlaskClient

from tests.api.conftest import task_body

TASKS = "/api/v1/tasks"


def test_a_task_that_can_never_fit_is_refused_naming_each_field_and_limit(
        client_for: Callable[..., FlaskClient]) -> None:
    mallory = client_for("mallory")
    resp = mallory.post(TASKS, json=task_body(resources={"cpu": "4096", "memory": "100Ti",
                                                         "gpus": 64}))
    assert resp.status_code == 422
    body = resp.get_json()
    assert body["code"] == "resources_invalid"
    errors = {e["field"]: e for e in body["errors"]}
    assert set(errors) == {"resources.cpu", "resources.memory", "resources.gpus"}
    assert errors["resources.gpus"]["limit"] == 8 and "at most 8" in errors["resources.gpus"][
        "message"]
    assert all(e["limit"] > 0 for e in errors.values())


def test_a_quantity_that_is_not_one_names_its_field(
        client_for: Callable[..., FlaskClient]) -> None:
    resp = client_for("mallory").post(TASKS, json=task_body(resources={"memory": "4GB"}))
    assert resp.status_code == 422
    assert [e["field"] for e in resp.get_json()["errors"]] == ["resources.memory"]


def test_resources_within_the_limits_are_accepted(
        client_for: Callable[..., FlaskClient]) -> None:
    resp = client_for("alice").post(TASKS, json=task_body(resources={"cpu": "500m",
                                                                     "memory": "64Mi"}))
    assert resp.status_code == 202, resp.get_json()


def test_a_nul_in_the_name_or_an_argument_is_refused_naming_the_field(
        client_for: Callable[..., FlaskClient]) -> None:
    resp = client_for("mallory").post(TASKS, json=task_body(
        name="evil\0name", steps=[["true"], ["sh", "-c", "echo\0oops"]]))
    assert resp.status_code == 422
    errors = resp.get_json()["errors"]
    assert sorted(e["field"] for e in errors) == ["name", "steps.1.2"]
    assert all("NUL" in e["message"] for e in errors)


def test_more_than_one_local_host_has_is_refused_saying_so(
        admin_client_with: Callable[..., FlaskClient]) -> None:
    client = admin_client_with(launcher="local", local_host_cpu="2", local_host_memory="4Gi")
    resp = client.post(TASKS, json=task_body(resources={"cpu": "3", "memory": "8Gi"}))
    assert resp.status_code == 422
    errors = {e["field"]: e for e in resp.get_json()["errors"]}
    assert errors["resources.cpu"]["limit"] == 2000
    assert errors["resources.memory"]["limit"] == 4 << 30
    assert all("one host of the local launcher" in e["message"] for e in errors.values())
    on_kubernetes = admin_client_with(launcher="kubernetes", local_host_cpu="2")
    assert on_kubernetes.post(TASKS, json=task_body(resources={"cpu": "3"})).status_code == 202
