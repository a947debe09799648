"""Real processes for the integration and fault tests: redis-server, Celery workers,
the reconciler and the API, started by the same functions ``make run`` uses.

Both conftests import from here, so a stack is configured, started and reached over
HTTP the same way whichever tests run it.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
import requests

from shared.access.tokens import PREFIX
from shared.secrets import new_key
from shared.task import states
from workers.localstack import (
    RedisServer,
    free_port,
    start_api,
    start_reconciler,
    start_worker,
    stop_all,
    wait_http,
)
from workers.queues import QUEUES

FINAL = set(states.FINAL)
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
    """Password-protected, as ``make run`` and compose run it: every client must log in."""
    server = RedisServer(tmp_path_factory.mktemp("redis"), password=secrets.token_hex(16)).start()
    yield server
    server.stop()


def stack_env(redis_url: str, root: Path, **settings: str) -> dict[str, str]:
    """Settings of one stack: a free port, its own task directory, fresh credentials."""
    return {
        "TASKENV_REDIS_URL": redis_url,
        "TASKENV_WORK_DIR": str(root / "tasks"),
        "TASKENV_PORT": str(free_port()),
        "TASKENV_LAUNCHER": "local",
        "TASKENV_ADMIN_TOKEN": PREFIX + uuid.uuid4().hex,
        "TASKENV_SECRET_KEYS": new_key(),
        **settings,
    }


def api_url(env: dict[str, str]) -> str:
    return f"http://127.0.0.1:{env['TASKENV_PORT']}"


def start_front(env: dict[str, str], logs: Path) -> list[subprocess.Popen[bytes]]:
    """The reconciler and the API; wait for them with ``wait_until_serving``."""
    return [start_reconciler(env, logfile=logs), start_api(env, logfile=logs)]


def wait_until_serving(env: dict[str, str]) -> None:
    wait_http(api_url(env) + "/healthz")


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
        kwargs.setdefault("timeout", 10)
        return requests.request(method, self.base + path, headers=headers, **kwargs)

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
    env = stack_env(redis_server.url, root,
                    **{"TASKENV_KEY_PREFIX": f"t{uuid.uuid4().hex[:8]}", **settings})
    logs = root / "processes.log"
    procs = [start_worker(q, env, logfile=logs) for q in QUEUES] + start_front(env, logs)
    try:
        wait_until_serving(env)
        yield stack_class(api_url(env), redis.Redis.from_url(redis_server.url),
                          env, root / "tasks", logs)
    finally:
        stop_all(procs)


def stop_group(proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    """SIGTERM a process started in a session of its own (``make worker`` and the worker it
    runs) and wait until every process of its group is gone: a worker's warm shutdown
    ends after make's own exit."""
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=timeout)
    deadline = time.monotonic() + timeout
    while True:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        assert time.monotonic() < deadline, f"process group {proc.pid} did not stop"
        time.sleep(0.2)
