"""The floor: a bare three-hop no-op Celery pipeline with taskenv's worker settings.

Each hop only enqueues the next; the last one writes the time it ran into a
Redis hash, so end-to-end latency is measured the way taskenv's is (the
client's submit time against a timestamp written by the last hop).

The settings are not copied by hand: every setting ``workers.celery_app.make_celery``
changes from Celery's defaults (acks_late, reject_on_worker_lost, prefetch 1,
ignore_result, time limits, the broker transport options with the global key
prefix, serializers ...) is mirrored here, except the routes and the task
module, which are this app's own.  Workers run with ``celery -A
bench.baseline_app worker`` and the same command-line flags as taskenv's.

Environment: ``BENCH_REDIS_URL`` (broker and the done-hash), ``BENCH_KEY_PREFIX``.
"""

from __future__ import annotations

import functools
import os
import time
from typing import Any

import redis
from celery import Celery

from shared.config import Settings
from workers.celery_app import make_celery

QUEUES = ("hop1", "hop2", "hop3")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
PREFIX = os.environ.get("BENCH_KEY_PREFIX", "bench")
# Ours, not taskenv's: which task goes to which queue, and which module holds the tasks.
NOT_MIRRORED = {"include", "task_routes", "task_default_queue", "broker_url", "imports"}


def done_key(run: str) -> str:
    """The hash the last hop writes ``pipeline id -> time.time()`` into."""
    return f"{PREFIX}:done:{run}"


def mirrored_settings(reference: Celery) -> dict[str, Any]:
    """Every setting taskenv's app changes from Celery's defaults."""
    defaults = Celery("defaults", set_as_current=False).conf
    return {key: reference.conf[key] for key in reference.conf
            if key not in NOT_MIRRORED and reference.conf[key] != defaults.get(key)}


def make_app(redis_url: str = REDIS_URL, prefix: str = PREFIX) -> Celery:
    reference = make_celery(Settings.from_env(redis_url=redis_url, key_prefix=prefix))
    app = Celery("bench", broker=redis_url)
    app.conf.update(mirrored_settings(reference))
    app.conf.update(task_default_queue=QUEUES[0],
                    task_routes={f"bench.{q}": {"queue": q} for q in QUEUES})
    return app


app = make_app()


@functools.cache
def _client() -> redis.Redis:
    return redis.Redis.from_url(REDIS_URL)  # one per (prefork child) process, on first use


# The same per-task time limits as taskenv's validate and policy tasks.
@app.task(name="bench.hop1", time_limit=120)
def hop1(pipeline_id: str, run: str) -> None:
    hop2.delay(pipeline_id, run)


@app.task(name="bench.hop2", time_limit=120)
def hop2(pipeline_id: str, run: str) -> None:
    hop3.delay(pipeline_id, run)


@app.task(name="bench.hop3")
def hop3(pipeline_id: str, run: str) -> None:
    _client().hset(done_key(run), pipeline_id, repr(time.time()))
