"""A task's image on a backend of runtime directories (local, Slurm): a runtime the admin
registered in TASKENV_RUNTIMES, or refused when the task is created."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from flask.testing import FlaskClient

from tests.api.conftest import task_body

TASKS = "/api/v1/tasks"
RUNTIMES = "pytorch-2.13=/opt/runtimes/pytorch,jax-0.4=/opt/runtimes/jax"


@pytest.mark.parametrize("launcher", ["local", "slurm"])
def test_an_unknown_runtime_is_refused_at_creation_naming_the_field_and_the_known_ones(
        admin_client_with: Callable[..., FlaskClient], launcher: str) -> None:
    client = admin_client_with(launcher=launcher, runtimes=RUNTIMES)
    for image in ("pytorch-2.12", "../../../usr", "/opt/runtimes/pytorch"):
        resp = client.post(TASKS, json=task_body(image=image))
        assert resp.status_code == 422, resp.get_json()
        body = resp.get_json()
        [problem] = body["errors"]
        assert (problem["rule"], problem["field"]) == ("runtime_unknown", "image")
        assert "jax-0.4, pytorch-2.13" in problem["message"], problem
    assert client.get(TASKS).get_json()["items"] == []  # nothing was stored


def test_every_problem_is_said_at_once_the_runtime_with_the_resources(
        admin_client_with: Callable[..., FlaskClient]) -> None:
    client = admin_client_with(runtimes=RUNTIMES)
    resp = client.post(TASKS, json=task_body(image="tensorflow",
                                             resources={"cpu": "4096", "gpus": 1}))
    assert resp.status_code == 422
    fields = sorted(e["field"] for e in resp.get_json()["errors"])
    assert fields == ["image", "resources.cpu", "resources.gpus"]


def test_a_registered_runtime_or_none_is_accepted(
        admin_client_with: Callable[..., FlaskClient]) -> None:
    client = admin_client_with(runtimes=RUNTIMES)
    for body in (task_body(image="pytorch-2.13"), task_body()):
        assert client.post(TASKS, json=body).status_code == 202
    refused = admin_client_with().post(TASKS, json=task_body(image="pytorch-2.13"))
    assert refused.status_code == 422
    assert "TASKENV_RUNTIMES registers none" in refused.get_json()["errors"][0]["message"]


@pytest.mark.parametrize("launcher", ["podman", "kubernetes", "dryrun"])
def test_a_backend_of_images_takes_any_image_as_before(
        admin_client_with: Callable[..., FlaskClient], launcher: str) -> None:
    client = admin_client_with(launcher=launcher, runtimes=RUNTIMES)
    assert client.post(TASKS, json=task_body(image="nvcr.io/x/pytorch:24.01")
                       ).status_code == 202
