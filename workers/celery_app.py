"""The Celery app, built from the same settings as the API.

Delivery is at-least-once: a message is acknowledged only after its task has
run (``acks_late``) and goes back to the queue if the worker dies under it
(``task_reject_on_worker_lost``).  The stages are written so that a second
delivery is a no-op.
"""

from __future__ import annotations

import functools
import time
from typing import Any

from celery import Celery, signals

from shared.config import Settings, process_settings
from shared.keys import Keys
from workers.queues import QUEUE_OF, QUEUES, SENT_AT, queue_of, task_name


def launch_time_limit(settings: Settings) -> int:
    """The launch stage's hard limit: it may run steps (local launcher) up to their timeout."""
    return settings.step_timeout_seconds + 300


def check_timeouts(settings: Settings) -> None:
    """A message must not be redelivered while its first delivery is still running."""
    if settings.visibility_timeout_seconds <= launch_time_limit(settings):
        raise ValueError(
            f"TASKENV_VISIBILITY_TIMEOUT_SECONDS ({settings.visibility_timeout_seconds}) must "
            f"exceed the launch time limit ({launch_time_limit(settings)}s: "
            "TASKENV_STEP_TIMEOUT_SECONDS + 300)")


def redis_transport_options(settings: Settings) -> dict[str, Any]:
    """How the broker's connections reach Redis: bounded, and behind sentinels.

    A socket timeout, so that a publish to a primary that vanished without closing its
    connections fails instead of waiting forever, and kombu's health checks run; the
    master name and the sentinels' own password are used with sentinel:// URLs only."""
    options: dict[str, Any] = {
        "master_name": settings.redis_master_name,
        "socket_timeout": settings.redis_timeout_seconds,
        "socket_connect_timeout": min(settings.redis_timeout_seconds, 2.0),
        "health_check_interval": 10,
    }
    if settings.redis_sentinel_password:
        options["sentinel_kwargs"] = {"password": settings.redis_sentinel_password}
    return options


def make_celery(settings: Settings) -> Celery:
    check_timeouts(settings)
    app = Celery("taskenv", broker=settings.redis_url,
                 include=["workers.tasks", "workers.liveness"])
    app.conf.update(
        task_time_limit=launch_time_limit(settings),
        task_ignore_result=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_default_queue="validate",
        task_routes={task_name(q): {"queue": queue_of(q)} for q in (*QUEUES, *QUEUE_OF)},
        broker_connection_retry_on_startup=True,
        broker_transport_options={
            "visibility_timeout": settings.visibility_timeout_seconds,
            "global_keyprefix": Keys(settings.key_prefix).celery_prefix(),
            **redis_transport_options(settings),
        },
        # Back on the broker within a second or two of a failover, not after 2-30 s.
        worker_consumer="workers.reconnect:QuickReconnectConsumer",
        worker_hijack_root_logger=False,
        # No remote control: its broadcast channel is a Redis pub/sub connection, and on
        # kombu 5.x a Redis restart can crash the worker through it.  Stages need none of
        # it; operators watch queues and task states instead.
        worker_enable_remote_control=False,
        task_serializer="json",
        accept_content=["json"],
    )
    return app


@functools.cache
def celery_for(settings: Settings) -> Celery:
    """One Celery app per process and settings: the one that sends is the one workers run."""
    return make_celery(settings)


def send_to_stage(settings: Settings, stage: str, task_id: str, revision: int) -> None:
    """One message, carrying ids only, to a stage's queue."""
    celery_for(settings).send_task(task_name(stage), args=[task_id, revision],
                                   queue=queue_of(stage))


@signals.worker_init.connect
def _refuse_unless_ready(sender: Any = None, **_: Any) -> None:
    """A worker of this app starts only with what its queues need (``workers.startup``:
    Redis, the launcher's set-up for the launch queue, the platform's secret keys);
    otherwise it exits with code 2 before it consumes anything, saying what is missing."""
    if sender is None or sender.app is not app:
        return
    from shared import metrics
    from workers.startup import refuse_unless_ready

    settings = process_settings()
    queues = [q.name for q in sender.app.amqp.queues.consume_from.values()]
    refuse_unless_ready(settings, f"the {', '.join(queues)} worker", queues)
    metrics.start_at_zero(settings.launcher, queues)  # what its own /metrics lists at 0


@signals.before_task_publish.connect
def _stamp_sent_time(headers: dict[str, Any] | None = None, **_: Any) -> None:
    """Every message this process sends (first sends, retries, re-enqueues) gets its time."""
    if headers is not None:
        headers.setdefault(SENT_AT, time.time())


# The worker's command line (``celery -A workers.celery_app worker``) and the task
# decorators in ``workers.tasks`` need the app when this module is imported.  Building
# it only reads this process's settings (the ones ``workers.services.current()`` uses)
# and connects to nothing, so importing this module needs no Redis.
app = celery_for(process_settings())
