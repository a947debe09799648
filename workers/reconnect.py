"""The workers' Celery consumer, reconnecting to the broker within a second or two.

When its Redis connection drops (a failover: the primary is gone and the sentinels
promote a replica within a few seconds), Celery's consumer reconnects through kombu's
``ensure_connection`` with fixed waits of 2, 4, 6... up to 30 seconds between rounds,
which no setting changes: a failover of two seconds left consumers idle for six, and
a longer outage for half a minute after Redis was back.  This consumer waits 0.5 s,
then 1 s, at most 2 s between rounds; each round asks every sentinel of the URL again
(kombu's failover over the ``;``-separated URLs), so it follows the new primary.

Selected with Celery's ``worker_consumer`` setting (``workers.celery_app``).
"""

from __future__ import annotations

import functools
from typing import Any

from celery.worker.consumer import Consumer

RECONNECT_WAITS = {"interval_start": 0.5, "interval_step": 0.5, "interval_max": 2.0}


class QuickReconnectConsumer(Consumer):  # type: ignore[misc]
    def ensure_connected(self, conn: Any) -> Any:
        conn.ensure_connection = functools.partial(conn.ensure_connection, **RECONNECT_WAITS)
        return super().ensure_connected(conn)
