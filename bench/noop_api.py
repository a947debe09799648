"""A no-op Flask JSON endpoint under taskenv's waitress settings: the HTTP floor.

``python -m bench.noop_api`` serves, on ``BENCH_NOOP_PORT``:

* ``POST /noop``: parses the JSON body, as any JSON endpoint does, and answers
  202 with a small JSON document.  No Redis, no auth, no schema: what is left is
  waitress (threads=8, as in ``api/__main__.py``), Flask and the JSON round trip.
* ``POST /noop-enqueue`` (only with ``BENCH_REDIS_URL`` set): the same, plus the
  least a thin enqueuing API must do: one Redis write (the record) and one Celery
  ``send_task`` built by taskenv's own ``make_celery``, to a queue nobody reads
  (key prefix ``noopq``).  The gap between this and ``POST /api/v1/tasks`` is
  what taskenv's API adds; the gap between it and ``/noop`` is Celery and Redis.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from typing import Any

from flask import Flask, request
from waitress import serve


def create_app(redis_url: str | None = None) -> Flask:
    app = Flask(__name__)
    if redis_url:
        _add_enqueue_route(app, redis_url)

    @app.post("/noop")
    def noop() -> tuple[dict[str, Any], int]:
        body = request.get_json()
        return {"id": uuid.uuid4().hex, "status": "pending", "name": body.get("name")}, 202

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app


def _add_enqueue_route(app: Flask, redis_url: str) -> None:
    import redis

    from shared.config import Settings
    from workers.celery_app import make_celery

    client = redis.Redis.from_url(redis_url, decode_responses=True)
    celery = make_celery(Settings.from_env(redis_url=redis_url, key_prefix="noopq"))

    @app.post("/noop-enqueue")
    def noop_enqueue() -> tuple[dict[str, Any], int]:
        body = request.get_json()
        task_id = uuid.uuid4().hex
        client.set(f"noopq:task:{task_id}", json.dumps(body))
        celery.send_task("taskenv.validate", args=[task_id, 1], queue="validate")
        return {"id": task_id, "status": "pending", "name": body.get("name")}, 202


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    port = int(os.environ.get("BENCH_NOOP_PORT", "8099"))
    serve(create_app(os.environ.get("BENCH_REDIS_URL")), host="127.0.0.1", port=port,
          threads=8, ident="noop")


if __name__ == "__main__":
    main()
