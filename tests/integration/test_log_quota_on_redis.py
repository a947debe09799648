"""Logs in the stored-bytes quota on a real redis-server: one tenant's output fills their
own quota, not everyone's Redis.

Tenant A's running tasks print (appends as their runners make them, a chunk per command)
until A's quota is full: A's output stops there with a line saying so, A's next task is
refused (409 naming the quota, what A uses and the limit), and tenant B, printing and
creating at the same moment, loses nothing.  Once A's tasks have expired the bytes are
given back, exactly.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient

from shared.access.quotas import LOG_FULL_NOTE
from shared.store.tasks import TaskStore
from shared.task import states
from tests.api.conftest import EnqueueSpy, build_app, client_with
from workers.localstack import RedisServer

pytestmark = pytest.mark.integration

TASKS = "/api/v1/tasks"
LIMIT = 2 * 1024 * 1024
LINE = "loss=0.25 step=000000 " + "x" * 1000 + "\n"  # about 1 KiB


@pytest.fixture
def app(redis_server: RedisServer) -> Flask:
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    return build_app(client, EnqueueSpy(),  # type: ignore[arg-type]  # a real Redis
                     key_prefix=f"lq{uuid.uuid4().hex[:8]}", quota_stored_bytes=LIMIT,
                     quota_creates_per_minute=0, retention_days=1e-9)


def user(app: Flask, owner: str) -> FlaskClient:
    token, _ = app.extensions["taskenv"].tokens.create(owner, "user", "tests")
    return client_with(app, token)


def create(client: FlaskClient) -> Any:
    return client.post(TASKS, json={"name": "train", "steps": [["python3", "train.py"]],
                                    "env": [{"name": "LEARNING_RATE", "value": "0.01"}]})


def running(tasks: TaskStore, task_id: str) -> None:
    for old, new in ((states.PENDING, states.VALIDATED), (states.VALIDATED, states.RESOLVED),
                     (states.RESOLVED, states.LAUNCHING), (states.LAUNCHING, states.RUNNING)):
        assert tasks.move(task_id, 1, old, new)


def printing(tasks: TaskStore, task_id: str, lines: int) -> Callable[[], None]:
    """A runner's appends: a few hundred lines at a time, as a pipe delivers them."""
    def run() -> None:
        for _ in range(lines // 200):
            tasks.append_log(task_id, 1, LINE * 200)
    return run


def at_once(*calls: Callable[[], Any]) -> list[Any]:
    """Run the calls on threads released together; their answers in order."""
    start = threading.Barrier(len(calls))
    answers: list[Any] = [None] * len(calls)

    def run(k: int) -> None:
        start.wait()
        answers[k] = calls[k]()

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


def test_one_tenants_logs_fill_their_own_quota_and_never_anothers(app: Flask) -> None:
    tasks: TaskStore = app.extensions["taskenv"].tasks
    alice, bob = user(app, "alice"), user(app, "bob")
    mine = [create(alice).get_json()["id"] for _ in range(3)]
    theirs = create(bob).get_json()["id"]
    for task_id in [*mine, theirs]:
        running(tasks, task_id)
    # Alice's three tasks print 3 x 1 MiB (past her 2 MiB) while Bob's prints 400 KiB.
    at_once(*(printing(tasks, t, 1000) for t in mine), printing(tasks, theirs, 400))

    used = tasks.stored_bytes("alice")
    assert used == tasks.recount_bytes("alice")
    assert LIMIT - 1024 <= used <= LIMIT + len(mine) * len(LOG_FULL_NOTE)
    logs = [tasks.read_log(t, 1) for t in mine]
    assert sum(log.endswith(LOG_FULL_NOTE) for log in logs) >= 1
    assert all(log.count("output dropped") <= 1 for log in logs)
    assert tasks.read_log(theirs, 1) == LINE * 400  # Bob's output, all of it

    refused, accepted = at_once(lambda: create(alice), lambda: create(bob))
    assert refused.status_code == 409 and accepted.status_code == 202
    (problem,) = refused.get_json()["errors"]
    assert (problem["rule"], problem["limit"]) == ("quota.stored_bytes", LIMIT)
    message = refused.get_json()["message"]
    for said in ("quota.stored_bytes", "user:alice", "logs", f"over the limit of {LIMIT}"):
        assert said in message, said
    assert f"take {tasks.stored_bytes('alice')} bytes" in message

    # Alice's tasks end: each log is stored at its own size (appends leave Redis' string
    # up to twice as large), then they expire: every byte, logs included, is given back.
    for task_id in mine:
        key = tasks.keys.log(task_id, 1)
        grown = tasks.r.memory_usage(key)
        assert tasks.move(task_id, 1, states.RUNNING, states.SUCCEEDED, exit_code=0)
        kept = int(tasks.r.strlen(key))
        # (jemalloc's size classes round a 400 KiB string up by at most a quarter)
        assert tasks.r.memory_usage(key) <= min(1.25 * kept, grown), (grown, kept)
    while tasks.expire_finished(time.time() + 1):
        pass
    assert tasks.stored_bytes("alice") == 0 == tasks.recount_bytes("alice")
    assert create(alice).status_code == 202
    assert tasks.stored_bytes("bob") == tasks.recount_bytes("bob") > 400 * len(LINE)
