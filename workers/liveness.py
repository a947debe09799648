"""A worker that stops consuming is restarted, not left to hang.

Kombu's Redis transport can come back from a Redis restart connected but no
longer fetching messages (celery/celery#8030, #10205).  Each worker's main
process watches its queue: when messages wait, every pool slot is free and
nothing has been received for ``TASKENV_CONSUMER_STALL_SECONDS``, the consumer
is stuck, and the worker shuts itself down so its supervisor (Kubernetes,
systemd, compose, ``make run``) starts a fresh one.  Unacknowledged messages are
redelivered and the reconciler re-enqueues what is idle, so nothing is lost.
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

from workers.services import Services, current

log = logging.getLogger(__name__)
_last_received = time.monotonic()


@signals.task_received.connect
def _received(**_: Any) -> None:
    global _last_received
    _last_received = time.monotonic()


@signals.worker_ready.connect
def _start_watch(sender: Any, **_: Any) -> None:
    queues = [q.name for q in sender.app.amqp.queues.consume_from.values()]
    thread = threading.Thread(target=_watch, args=(current(), queues), daemon=True,
                              name="consumer-liveness")
    thread.start()


def stalled(waiting: int, active: int, idle_for: float, limit: float) -> bool:
    """Messages wait, no slot is busy, and nothing came in for too long."""
    return waiting > 0 and active == 0 and idle_for > limit


def _watch(svc: Services, queues: list[str]) -> None:
    limit = svc.settings.consumer_stall_seconds
    keys = [svc.keys.queue(q) for q in queues]
    while True:
        time.sleep(max(1.0, limit / 4))
        try:
            waiting = sum(int(svc.redis.llen(k)) for k in keys)  # type: ignore[arg-type]
        except Exception:  # Redis away: that is the broker's problem, not a stall
            log.debug("liveness: Redis unavailable; checking again later")
            continue
        idle_for = time.monotonic() - _last_received
        if stalled(waiting, len(state.active_requests), idle_for, limit):
            log.error("consumer stalled: %d messages wait in %s, none received for %.0fs; "
                      "shutting down to be restarted", waiting, ",".join(queues), idle_for)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)
            os._exit(70)  # the warm shutdown hung too
