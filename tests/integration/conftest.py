"""Real processes: a redis-server, one Celery worker per queue and the API.

Nothing is faked here: messages cross Redis between separate worker processes,
exactly as in ``make run``, whose process-starting functions these fixtures use.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
import requests

from shared.secrets import new_key
from shared.tokens import PREFIX
from workers.celery_app import QUEUES
from workers.localstack import (
    RedisServer,
    free_port,
    start_api,
    start_reconciler,
    start_worker,
    stop_all,
    wait_http,
)

FINAL = {"succeeded", "failed", "rejected"}
# Values a shell would act on; taskenv must deliver them exactly as typed.
HOSTILE = {
    "SUBSHELL": "$(HOME)",
    "BACKTICKS": "`id`",
    "SEMICOLON": "a;b",
    "NEWLINES": "line one\nline two\n",
    "NON_ASCII": "数据集/训练 — ünïcode ✓",
    "QUOTES": "'\"\\",
}


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


class Stack:
    """The running stack, as a user reaches it: over HTTP."""

    def __init__(self, base: str, redis_client: redis.Redis, env: dict[str, str],
                 work_dir: Path, logs: Path) -> None:
        self.base, self.redis, self.env = base, redis_client, env
        self.work_dir, self.logs = work_dir, logs
        self.admin_token = env["TASKENV_ADMIN_TOKEN"]
        self.token = self.admin_token  # callers act as the admin unless they pass a token

    def call(self, method: str, path: str, token: str | None = None,
             **kwargs: Any) -> requests.Response:
        headers = {"Authorization": f"Bearer {token or self.token}", **kwargs.pop("headers", {})}
        return requests.request(method, self.base + path, timeout=10, headers=headers, **kwargs)

    def new_token(self, owner: str, role: str = "user") -> str:
        resp = self.call("POST", "/api/v1/tokens", token=self.admin_token,
                         json={"owner": owner, "role": role})
        assert resp.status_code == 201, resp.text
        return str(resp.json()["token"])

    def set_policy(self, policy: dict[str, Any]) -> dict[str, Any]:
        resp = self.call("PUT", "/api/v1/policy", json=policy)
        assert resp.status_code == 200, resp.text
        return resp.json()

    def create(self, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        resp = self.call("POST", "/api/v1/tasks", json=body, **kwargs)
        assert resp.status_code == 202, resp.text
        return resp.json()

    def task(self, task_id: str) -> dict[str, Any]:
        resp = self.call("GET", f"/api/v1/tasks/{task_id}")
        assert resp.status_code == 200, resp.text
        return resp.json()

    def wait(self, task_id: str, revision: int = 1, timeout: float = 60.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            doc = self.task(task_id)
            if doc["revision"] == revision and doc["status"] in FINAL:
                return doc
            if time.monotonic() > deadline:
                raise AssertionError(f"task {task_id} stuck: {doc['status']} r{doc['revision']}")
            time.sleep(0.1)


@contextmanager
def running_stack(redis_server: RedisServer, root: Path, stack_class: type[Stack] = Stack,
                  **settings: str) -> Iterator[Stack]:
    """Workers for every queue, the reconciler and the API, with their own key prefix."""
    port = free_port()
    env = {
        "TASKENV_REDIS_URL": redis_server.url,
        "TASKENV_KEY_PREFIX": f"t{uuid.uuid4().hex[:8]}",
        "TASKENV_WORK_DIR": str(root / "tasks"),
        "TASKENV_PORT": str(port),
        "TASKENV_LAUNCHER": "local",
        "TASKENV_ADMIN_TOKEN": PREFIX + uuid.uuid4().hex,
        "TASKENV_SECRET_KEYS": new_key(),
        **settings,
    }
    logs = root / "processes.log"
    procs = [start_worker(q, env, logfile=logs) for q in QUEUES]
    procs += [start_reconciler(env, logfile=logs), start_api(env, logfile=logs)]
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz")
        yield stack_class(f"http://127.0.0.1:{port}", redis.Redis.from_url(redis_server.url),
                          env, root / "tasks", logs)
    finally:
        stop_all(procs)


@pytest.fixture(scope="module")
def stack(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(redis_server, tmp_path_factory.mktemp("stack")) as running:
        yield running
