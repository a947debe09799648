"""A task's workdir is a relative path inside its home, checked before anything is stored."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import fakeredis
import pytest
from flask.testing import FlaskClient

TASKS = "/api/v1/tasks"


def body(workdir: str) -> dict[str, Any]:
    return {"name": "train", "steps": [["true"]], "workdir": workdir}


@pytest.mark.parametrize("workdir, says", [
    ("/", "absolute"), ("/etc", "absolute"), ("../../etc", "'..'"), ("a/../..", "'..'"),
    ("a\0b", "NUL"), ("x" * 1025, "1024"),
])
def test_a_workdir_outside_the_home_is_422_naming_the_field(
        client: FlaskClient, enqueued: Any, redis_client: fakeredis.FakeRedis,
        error_shape: Callable[..., None], workdir: str, says: str) -> None:
    response = client.post(TASKS, json=body(workdir))
    assert response.status_code == 422
    error_shape(response.get_json())
    [problem] = response.get_json()["errors"]
    assert problem["field"] == "workdir" and says in problem["message"]
    assert enqueued.calls == [] and redis_client.keys("*:task:*") == []


@pytest.mark.parametrize("workdir", ["var", "runs/exp1", "a..b"])
def test_a_relative_workdir_is_accepted(client: FlaskClient, workdir: str) -> None:
    response = client.post(TASKS, json=body(workdir))
    assert response.status_code == 202, response.get_json()
