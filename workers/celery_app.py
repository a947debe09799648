"""The Celery app, built from the same settings as the API.

Delivery is at-least-once: a message is acknowledged only after its task has
run (``acks_late``) and goes back to the queue if the worker dies under it
(``task_reject_on_worker_lost``).  The stages are written so that a second
delivery is a no-op.
"""

from __future__ import annotations

from celery import Celery

from shared.config import Settings

QUEUES = ("validate", "policy", "launch")


def make_celery(settings: Settings) -> Celery:
    app = Celery("taskenv", broker=settings.redis_url, include=["workers.tasks"])
    app.conf.update(
        task_ignore_result=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_default_queue="validate",
        task_routes={f"taskenv.{q}": {"queue": q} for q in QUEUES},
        broker_connection_retry_on_startup=True,
        broker_transport_options={
            "visibility_timeout": settings.visibility_timeout_seconds,
            "global_keyprefix": f"{settings.key_prefix}:celery:",
        },
        worker_hijack_root_logger=False,
        task_serializer="json",
        accept_content=["json"],
    )
    return app


app = make_celery(Settings.from_env())
