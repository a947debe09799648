"""The API on fakeredis, with an enqueue spy that looks at Redis when it is called."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import fakeredis
import pytest
from flask import Flask
from flask.testing import FlaskClient

from api import create_app
from shared.access.tokens import PREFIX
from shared.policy.store import PolicyStore
from shared.secrets import new_key
from shared.store.tasks import TaskStore
from shared.task import states

ADMIN_TOKEN = PREFIX + "admin-for-api-tests-0123456789abcdef"

# The states a task walks through on its way to success, in order.
WALK = [states.PENDING, states.VALIDATED, states.RESOLVED, states.LAUNCHING, states.RUNNING,
        states.SUCCEEDED]


class EnqueueSpy:
    """Stands in for Celery: records each call and what Redis held at that moment."""

    def __init__(self) -> None:
        self.store: TaskStore | None = None  # the app's own store, set once the app exists
        self.calls: list[tuple[str, int]] = []
        self.records_seen: list[dict[str, Any] | None] = []

    def __call__(self, task_id: str, revision: int) -> None:
        assert self.store is not None
        self.calls.append((task_id, revision))
        self.records_seen.append(self.store.find(task_id))


@pytest.fixture
def redis_client() -> fakeredis.FakeRedis:
    return fakeredis.FakeRedis(decode_responses=True)


@pytest.fixture
def enqueued() -> EnqueueSpy:
    return EnqueueSpy()


def build_app(client: fakeredis.FakeRedis, enqueued: EnqueueSpy, **overrides: Any) -> Flask:
    config = {"admin_token": ADMIN_TOKEN, "secret_keys": new_key(), **overrides}
    app = create_app(config, redis_client=client, enqueue=enqueued)
    enqueued.store = app.extensions["taskenv"].tasks
    return app


@pytest.fixture
def app(redis_client: fakeredis.FakeRedis, enqueued: EnqueueSpy) -> Flask:
    return build_app(redis_client, enqueued)


@pytest.fixture
def admin_client_with(redis_client: fakeredis.FakeRedis,
                      enqueued: EnqueueSpy) -> Callable[..., FlaskClient]:
    """An admin's client for an app built with other settings (e.g. max_request_bytes)."""

    def make(**overrides: Any) -> FlaskClient:
        return client_with(build_app(redis_client, enqueued, **overrides), ADMIN_TOKEN)

    return make


def client_with(app: Flask, token: str) -> FlaskClient:
    client = app.test_client()
    client.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    return client


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    """A client acting as the platform admin."""
    return client_with(app, ADMIN_TOKEN)


@pytest.fixture
def client_for(app: Flask) -> Callable[..., FlaskClient]:
    """A client acting as a new user (or admin) with its own token."""

    def make(owner: str, role: str = "user") -> FlaskClient:
        token, _ = app.extensions["taskenv"].tokens.create(owner, role, "tests")
        return client_with(app, token)

    return make


@pytest.fixture
def tasks(app: Flask) -> TaskStore:
    return app.extensions["taskenv"].tasks


@pytest.fixture
def policies(app: Flask) -> PolicyStore:
    return app.extensions["taskenv"].policies


def task_body(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"name": "resnet", "steps": [["python3", "train.py"]],
                            "env": [{"name": "LEARNING_RATE", "value": "0.01"}]}
    body.update(changes)
    return body


@pytest.fixture
def create_task(client: FlaskClient) -> Callable[..., str]:
    """POST a task (any body fields may be overridden) and return its id."""

    def create(**changes: Any) -> str:
        response = client.post("/api/v1/tasks", json=task_body(**changes))
        assert response.status_code == 202, response.get_json()
        return response.get_json()["id"]

    return create


@pytest.fixture
def move_to(tasks: TaskStore) -> Callable[[str, str], None]:
    """Walk a task's current revision to ``target`` through the store's transitions."""

    def move(task_id: str, target: str) -> None:
        doc = tasks.get(task_id)
        revision = doc["revision"]
        if target == states.QUEUED:  # waiting for a local run slot: on the way to running
            move(task_id, states.LAUNCHING)
            assert tasks.transition(task_id, revision, states.LAUNCHING, target) is not None
            return
        if target not in WALK:  # rejected and failed are reachable straight from pending
            assert tasks.transition(task_id, revision, doc["state"], target) is not None
            return
        for old, new in zip(WALK, WALK[1:], strict=False):
            if WALK.index(new) > WALK.index(target):
                break
            if WALK.index(old) >= WALK.index(doc["state"]):
                assert tasks.transition(task_id, revision, old, new) is not None

    return move


@pytest.fixture
def error_shape() -> Callable[..., None]:
    """Checks the one error body every endpoint answers with."""
    return assert_error_shape


def assert_error_shape(body: dict[str, Any], code: str | None = None) -> None:
    assert set(body) == {"code", "message", "errors"}, body
    assert isinstance(body["message"], str) and body["message"]
    for problem in body["errors"]:
        assert {"rule", "message"} <= set(problem), problem
        assert set(problem) <= {"rule", "message", "variable", "field", "limit"}, problem
    if code is not None:
        assert body["code"] == code, body


# --- the console, as a browser uses it ---------------------------------------------------

CSRF = re.compile(r'name="csrf" value="([^"]+)"')
FORM_ID = re.compile(r'name="form_id" value="([^"]+)"')


class Browser:
    """A test client that behaves like a browser on the pages: a cookie jar and the
    CSRF token the pages put in every form."""

    def __init__(self, client: FlaskClient) -> None:
        self.client = client

    def csrf(self) -> str:
        match = CSRF.search(self.client.get("/ui/login").text)
        assert match, "the login page carries a CSRF token"
        return match.group(1)

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.client.get(path, **kwargs)

    def post(self, path: str, data: dict[str, str], csrf: bool = True) -> Any:
        return self.client.post(path, data={**data, "csrf": self.csrf()} if csrf else data)

    def login(self, token: str) -> Any:
        return self.post("/ui/login", {"token": token})

    def create(self, **fields: str) -> str:
        """Submit the new-task form; returns the new task's id."""
        form_id = FORM_ID.search(self.get("/ui/tasks/new").text).group(1)
        resp = self.post("/ui/tasks/new", {"form_id": form_id, **fields})
        assert resp.status_code == 302, resp.text
        return resp.location.rsplit("/", 1)[1]


@pytest.fixture
def browser(app: Flask):
    """A logged-in browser for an owner with a role; the admin by default."""

    def make(owner: str = "admin", role: str = "user") -> Browser:
        b = Browser(app.test_client())
        token = ADMIN_TOKEN if owner == "admin" else \
            app.extensions["taskenv"].tokens.create(owner, role, "tests")[0]
        assert b.login(token).status_code == 302
        return b

    return make
