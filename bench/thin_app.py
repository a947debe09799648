"""The thin design's floor: the least any design of taskenv's shape does per task.

* ``python -m bench.thin_app`` serves ``POST /tasks?run=<name>`` under the API's own
  WSGI server and threads (waitress, ``api.__main__.THREADS``): it parses the JSON
  body, writes one record of about 2 KB (a Redis hash, one ``HSET``) and enqueues its
  id with one ``send_task``.  No auth, no schema, no audit, no quota.
* Three Celery hops (``celery -A bench.thin_app worker -Q thin1`` ..., the flags of
  ``workers.localstack.worker_argv`` and every setting taskenv's app changes, as in
  ``bench/baseline_app.py``) each read the record (``HGETALL``) and write it back
  with a new state (``HSET`` of ``state`` and ``updated_at``).  The third hop writes
  the time it started into a Redis hash, as the bare pipeline's does.

Environment: ``BENCH_REDIS_URL``, ``BENCH_KEY_PREFIX``, ``BENCH_THIN_PORT``.
"""

from __future__ import annotations

import functools
import json
import os
import time
import uuid
from typing import Any

import redis
from celery import Celery
from flask import Flask, request

from bench.baseline_app import mirrored_settings
from bench.inputs import user_env
from shared.config import Settings
from workers.celery_app import make_celery

QUEUES = ("thin1", "thin2", "thin3")
STATES = ("validated", "resolved", "succeeded")  # what each hop writes
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
PREFIX = os.environ.get("BENCH_KEY_PREFIX", "thin")


def record_key(task_id: str) -> str:
    return f"{PREFIX}:task:{task_id}"


def done_key(run: str) -> str:
    """The hash the last hop writes ``task id -> time.time()`` into, when it starts."""
    return f"{PREFIX}:done:{run}"


def record(task_id: str, body: dict[str, Any]) -> dict[Any, Any]:
    """The stored record: the body's fields and a resolved env: about 2 KB."""
    resolved = [{"name": e["name"], "value": e["value"][:8]} for e in user_env(30)]
    return {"id": task_id, "owner": "admin", "state": "pending", "revision": "1",
            "name": str(body.get("name")), "steps": json.dumps(body.get("steps")),
            "env": json.dumps(body.get("env")), "resolved": json.dumps(resolved),
            "created_at": repr(time.time()), "updated_at": repr(time.time())}


def make_app(redis_url: str = REDIS_URL, prefix: str = PREFIX) -> Celery:
    reference = make_celery(Settings.from_env(redis_url=redis_url, key_prefix=prefix))
    app = Celery("thin", broker=redis_url)
    app.conf.update(mirrored_settings(reference))
    app.conf.update(task_default_queue=QUEUES[0],
                    task_routes={f"thin.hop{i}": {"queue": q} for i, q in enumerate(QUEUES, 1)})
    return app


app = make_app()


@functools.cache
def _client() -> redis.Redis:
    return redis.Redis.from_url(REDIS_URL)  # one per process, on first use


def _step(task_id: str, state: str) -> None:
    """Read the record and write it back with a new state."""
    client = _client()
    client.hgetall(record_key(task_id))
    client.hset(record_key(task_id), mapping={"state": state, "updated_at": repr(time.time())})


# The same per-task time limits as taskenv's validate and policy tasks.
@app.task(name="thin.hop1", time_limit=120)
def hop1(task_id: str, run: str) -> None:
    _step(task_id, STATES[0])
    hop2.delay(task_id, run)


@app.task(name="thin.hop2", time_limit=120)
def hop2(task_id: str, run: str) -> None:
    _step(task_id, STATES[1])
    hop3.delay(task_id, run)


@app.task(name="thin.hop3")
def hop3(task_id: str, run: str) -> None:
    _client().hset(done_key(run), task_id, repr(time.time()))
    _step(task_id, STATES[2])


def create_api() -> Flask:
    api = Flask(__name__)
    client = redis.Redis.from_url(REDIS_URL)

    @api.post("/tasks")
    def create() -> tuple[dict[str, Any], int]:
        body = request.get_json()
        task_id = uuid.uuid4().hex
        client.hset(record_key(task_id), mapping=record(task_id, body))
        app.send_task("thin.hop1", args=[task_id, request.args.get("run", "")], queue=QUEUES[0])
        return {"id": task_id, "status": "pending"}, 202

    @api.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return api


def main() -> None:
    from waitress import serve

    from api.__main__ import THREADS

    serve(create_api(), host="127.0.0.1", port=int(os.environ.get("BENCH_THIN_PORT", "8098")),
          threads=THREADS, ident="thin")


if __name__ == "__main__":
    main()
