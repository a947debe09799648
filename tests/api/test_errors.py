"""Domain errors carry no HTTP status; the API maps each class to one."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from api.errors import STATUS, status_for
from shared import errors
from shared.errors import NotFound, PermanentError, TaskenvError

DOMAIN_ERRORS = [cls for _, cls in inspect.getmembers(errors, inspect.isclass)
                 if issubclass(cls, TaskenvError)]


@pytest.mark.parametrize(("name", "status"), [
    ("EnvInvalid", 422), ("PolicyConflict", 422), ("PolicyInvalid", 422),
    ("SecretsUnavailable", 422), ("BadRequest", 400), ("Unauthorized", 401),
    ("Forbidden", 403), ("NotFound", 404), ("StateConflict", 409),
    ("TooManyRequests", 429), ("LaunchFailed", 500), ("TransientError", 503),
    ("StoreFull", 503), ("PermanentError", 500), ("TaskenvError", 500)])
def test_each_domain_error_answers_its_status(name: str, status: int) -> None:
    assert status_for(getattr(errors, name)("why")) == status


def test_the_core_knows_no_http_and_every_error_class_has_a_status() -> None:
    assert all("status" not in vars(cls) for cls in DOMAIN_ERRORS)
    assert {cls.__name__ for cls in DOMAIN_ERRORS} - {c.__name__ for c in STATUS} \
        == {"PermanentError"}  # a base class: its subclasses name their own


def test_a_subclass_answers_its_nearest_listed_class() -> None:
    class TokenNotFound(NotFound):
        pass

    class Refused(PermanentError):
        pass

    assert status_for(TokenNotFound("no such token")) == 404
    assert status_for(Refused("no")) == 500


def test_a_full_store_is_a_503_naming_it_and_stores_nothing(
        app: Any, client: Any, tasks: Any) -> None:
    """Past the reserve, a creation, a change and a rerun are refused alike; an
    out-of-memory reply from Redis itself answers the same."""
    from shared.store.room import Memory
    from workers.services import Services

    services: Services = app.extensions["taskenv"]
    services.room._seen = (float("inf"), Memory(99, 100))  # read "now", forever
    refused = client.post("/api/v1/tasks", json={"name": "t", "steps": [["true"]], "env": []})
    assert refused.status_code == 503
    assert refused.get_json()["code"] == "store_full"
    assert "maxmemory" in refused.get_json()["message"]
    assert refused.headers["Retry-After"] == "30"
    assert tasks.all_ids() == []


def test_a_put_or_patch_without_a_body_is_a_400_and_changes_nothing(admin_client_with) -> None:
    client = admin_client_with()
    assert client.post("/api/v1/projects", json={"name": "team", "members": ["alice"]}
                       ).status_code == 201
    for method, path in (("PATCH", "/api/v1/projects/team"), ("PUT", "/api/v1/policy")):
        answer = client.open(path, method=method)
        assert answer.status_code == 400, (method, answer.get_json())
        assert answer.get_json()["code"] == "bad_request"
        assert "needs a JSON body" in answer.get_json()["message"]
    assert client.get("/api/v1/projects/team").get_json()["members"] == ["alice"]
