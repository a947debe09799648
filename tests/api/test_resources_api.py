"""A task's resources and its argv, judged when it is created, as a plain user sends them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from flask.testing import FlaskClient

from tests.api.conftest import build_app, client_with, task_body

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


def user_on(launcher: str, redis_client: Any, enqueued: Any) -> FlaskClient:
    """A plain user's client of an app whose backend is ``launcher`` (its traits decide)."""
    app = build_app(redis_client, enqueued, launcher=launcher)
    token, _ = app.extensions["taskenv"].tokens.create("mallory", "user", "tests")
    return client_with(app, token)


@pytest.mark.parametrize("launcher", ["local", "podman"])
def test_gpus_asked_of_a_backend_that_has_none_are_refused_at_creation_naming_it(
        launcher: str, redis_client: Any, enqueued: Any) -> None:
    mallory = user_on(launcher, redis_client, enqueued)
    resp = mallory.post(TASKS, json=task_body(resources={"gpus": 1, "cpu": "64"}))
    assert resp.status_code == 422, resp.get_json()
    body = resp.get_json()
    gpus = next(e for e in body["errors"] if e["field"] == "resources.gpus")
    assert gpus["limit"] == 0 and f"the {launcher} launcher gives a task no GPU" in gpus[
        "message"]
    # Every problem at once: the cpu beyond what any task may have is named beside it.
    assert {e["field"] for e in body["errors"]} == {"resources.gpus", "resources.cpu"}
    assert mallory.get(TASKS).get_json()["items"] == []  # nothing was stored


@pytest.mark.parametrize("launcher", ["kubernetes", "slurm"])
def test_gpus_asked_of_a_backend_that_gives_them_are_accepted(
        launcher: str, redis_client: Any, enqueued: Any) -> None:
    resp = user_on(launcher, redis_client, enqueued).post(
        TASKS, json=task_body(resources={"gpus": 2}))
    assert resp.status_code == 202, resp.get_json()
