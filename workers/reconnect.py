"""The workers' Celery consumer, reconnecting to the broker within a second or two.

When its Redis connection drops (a failover: the primary is gone and the sentinels
promote a replica within a few seconds), Celery's consumer reconnects through kombu's
``ensure_connection`` with fixed waits of 2, 4, 6... up to 30 seconds between rounds,
which no setting changes: a failover of two seconds left consumers idle for six, and
a longer outage for half a minute after Redis was back.  This consumer waits 0.5 s,
then 1 s, at most 2 s between rounds; each round asks every sentinel of the URL again
(kombu's failover over the ``;``-separated URLs), so it follows the new primary.

Selected with Celery's ``worker_consumer`` setting (``workers.celery_app``).

A message whose ack (or reject) fails during a failover still gives its prefetch slot
back: see :class:`SlotReleasingQoS`.
"""

from __future__ import annotations

import functools
from typing import Any

from celery.worker.consumer import Consumer
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual

import shared.redis_conn  # noqa: F401  # its sentinels skip one still failing over

RECONNECT_WAITS = {"interval_start": 0.5, "interval_step": 0.5, "interval_max": 2.0}


class SlotReleasingQoS(kombu_redis.QoS):  # type: ignore[misc]
    """kombu's Redis QoS, except that a failed ack or reject still frees the message's slot.

    kombu removes the message from the unacked index in Redis first and forgets it
    locally only if that succeeded: when Redis is away (a failover), the message stays
    in ``_delivered`` for good and keeps its prefetch slot.  A worker whose slots were
    all busy when the primary died had no BRPOP pending, so its event loop never saw the
    connection drop and Celery never rebuilt the channel; its tasks' acks then failed,
    ``can_consume()`` stayed False, BRPOP was never sent again: connected, consuming
    nothing, until the watchdog restarted it.  Forgetting the message locally anyway lets
    BRPOP go out again (reconnecting, through the sentinels, to the new primary); the
    error is raised still, so Celery logs it.  The message's unacked entry stays in Redis
    and is redelivered after the visibility timeout: a second delivery, a no-op."""

    def ack(self, delivery_tag: Any) -> None:
        try:
            super().ack(delivery_tag)
        except Exception:
            virtual.QoS.ack(self, delivery_tag)
            raise

    def reject(self, delivery_tag: Any, requeue: bool = False) -> None:
        try:
            super().reject(delivery_tag, requeue=requeue)
        except Exception:
            virtual.QoS.ack(self, delivery_tag)
            raise


# The sentinel channel inherits it; set before the worker opens its first channel.
kombu_redis.Channel.QoS = SlotReleasingQoS


class QuickReconnectConsumer(Consumer):  # type: ignore[misc]
    def ensure_connected(self, conn: Any) -> Any:
        conn.ensure_connection = functools.partial(conn.ensure_connection, **RECONNECT_WAITS)
        return super().ensure_connected(conn)
