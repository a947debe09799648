"""A worker that stops consuming is restarted, not left to hang.

Kombu's Redis transport can come back from a Redis restart connected but no
longer fetching messages (celery/celery#8030, #10205).  Each worker's main
process watches its queue: when messages wait, every pool slot is free and
nothing has been received for ``TASKENV_CONSUMER_STALL_SECONDS``, the consumer
is stuck, and the worker shuts itself down so its supervisor (Kubernetes,
systemd, compose, ``make run``) starts a fresh one.  Unacknowledged messages are
redelivered and the reconciler re-enqueues what is idle, so nothing is lost.

The same watch publishes the worker's liveness for the API's ``/readyz``: while
its consumer is healthy, the worker's name sits in each of its queues' consumer
set (``Keys.consumers``) with an expiry a few watch periods ahead; a warm shutdown
takes it out at once.  Remote control (Celery's broadcast ``ping``) stays off.
The worker also serves its processes' metrics on ``TASKENV_METRICS_PORT`` if set.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from typing import Any

from celery import signals
from celery.worker import state

from shared import metrics
from workers.services import Services, current

log = logging.getLogger(__name__)
_last_received = time.monotonic()
_consuming: dict[str, Any] = {}  # this worker's name and queues, once it is ready


@signals.task_received.connect
def _received(**_: Any) -> None:
    global _last_received
    _last_received = time.monotonic()


@signals.worker_ready.connect
def _start_watch(sender: Any, **_: Any) -> None:
    svc = current()
    queues = [q.name for q in sender.app.amqp.queues.consume_from.values()]
    _consuming.update(name=sender.hostname, queues=queues)
    if svc.settings.metrics_port:
        metrics.serve(svc.settings.metrics_port, svc.settings.host)
    publish_alive(svc, sender.hostname, queues)  # ready at once, not a period later
    thread = threading.Thread(target=_watch, args=(svc, sender.hostname, queues), daemon=True,
                              name="consumer-liveness")
    thread.start()


@signals.worker_shutdown.connect
def _withdraw(**_: Any) -> None:
    """A worker going away stops counting as a consumer now, not when its entry expires."""
    if _consuming:
        try:
            withdraw(current(), _consuming["name"], _consuming["queues"])
        except Exception:  # Redis away: the entry expires by itself
            log.debug("liveness: could not withdraw this worker's consumer entries")


def period(svc: Services) -> float:
    """How often the watch runs."""
    return max(1.0, svc.settings.consumer_stall_seconds / 4)


def stalled(waiting: int, active: int, idle_for: float, limit: float) -> bool:
    """Messages wait, no slot is busy, and nothing came in for too long."""
    return waiting > 0 and active == 0 and idle_for > limit


def publish_alive(svc: Services, worker: str, queues: list[str]) -> None:
    """This worker consumes ``queues`` for three more watch periods."""
    now = time.time()
    ttl = 3 * period(svc)
    pipe = svc.redis.pipeline(transaction=False)
    for queue in queues:
        key = svc.keys.consumers(queue)
        pipe.zadd(key, {worker: now + ttl})
        pipe.zremrangebyscore(key, "-inf", now)  # workers that died without withdrawing
        pipe.expire(key, int(ttl) + 1)
    pipe.execute()


def withdraw(svc: Services, worker: str, queues: list[str]) -> None:
    pipe = svc.redis.pipeline(transaction=False)
    for queue in queues:
        pipe.zrem(svc.keys.consumers(queue), worker)
    pipe.execute()


def _watch(svc: Services, worker: str, queues: list[str]) -> None:
    limit = svc.settings.consumer_stall_seconds
    keys = [svc.keys.queue(q) for q in queues]
    while True:
        time.sleep(period(svc))
        try:
            waiting = sum(int(svc.redis.llen(k)) for k in keys)  # type: ignore[arg-type]
        except Exception:  # Redis away: that is the broker's problem, not a stall
            log.debug("liveness: Redis unavailable; checking again later")
            continue
        idle_for = time.monotonic() - _last_received
        if stalled(waiting, len(state.active_requests), idle_for, limit):
            _restart(queues, waiting, idle_for)
        try:
            publish_alive(svc, worker, queues)
        except Exception:  # Redis went away between the two calls
            log.debug("liveness: could not publish this worker's consumer entries")


def _restart(queues: list[str], waiting: int, idle_for: float) -> None:
    log.error("consumer stalled: %d messages wait in %s, none received for %.0fs; "
              "shutting down to be restarted", waiting, ",".join(queues), idle_for)
    for queue in queues:
        metrics.CONSUMER_RESTARTS.labels(queue=queue).inc()
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)
    os._exit(70)  # the warm shutdown hung too
