"""Bodies built to hurt: each gets a clear 4xx in the one error shape, never a 5xx."""

from __future__ import annotations

import json

import pytest
from flask.testing import FlaskClient

from tests.api.conftest import task_body

TASKS = "/api/v1/tasks"


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("raw,content_type", [
    (b'{"name": "t", "steps": [["true"]]', "application/json"),       # truncated
    (b"\xff\xfe not utf-8", "application/json"),                      # not text
    (b"name=t&steps=true", "application/x-www-form-urlencoded"),     # not JSON at all
    (b"", "application/json"),                                        # empty
    (b"[]", "application/json"),                                      # wrong top-level type
    (b"null", "application/json"),
    (json.dumps({"name": "t", "steps": nested(5000)}).encode(), "application/json"),
])
def test_malformed_bodies_are_4xx_in_the_error_shape(client: FlaskClient, raw: bytes,
                                                     content_type: str):
    resp = client.post(TASKS, data=raw, headers={"Content-Type": content_type})

    assert 400 <= resp.status_code < 500, resp.status_code
    body = resp.get_json()
    assert set(body) == {"code", "message", "errors"}


def test_deeply_nested_json_is_refused_not_a_crash(client: FlaskClient):
    raw = '{"name": "t", "steps": ' + nested(100_000) + "}"

    resp = client.post(TASKS, data=raw, headers={"Content-Type": "application/json"})

    assert resp.status_code in (400, 422)
    assert resp.get_json()["code"] in ("bad_request", "unprocessable_entity")


def test_a_body_over_the_size_limit_is_413(client: FlaskClient):
    big = task_body(env=[{"name": "BIG", "value": "x" * (5 * 1024 * 1024)}])

    resp = client.post(TASKS, json=big)

    assert resp.status_code == 413
    assert resp.get_json()["code"] == "request_entity_too_large"


def test_too_many_steps_or_arguments_are_refused_with_the_field(client: FlaskClient):
    resp = client.post(TASKS, json=task_body(steps=[["true"]] * 101))

    assert resp.status_code == 422
    assert [e["field"] for e in resp.get_json()["errors"]] == ["steps"]


def test_wrong_types_everywhere_are_all_reported(client: FlaskClient):
    resp = client.post(TASKS, json={"name": 7, "steps": [[1]], "env": [{"name": "A",
                                                                      "value": 2,
                                                                      "secret": "yes"}]})

    assert resp.status_code == 422
    fields = {e["field"] for e in resp.get_json()["errors"]}
    assert {"name", "steps.0.0", "env.0.value", "env.0.secret"} <= fields
