"""Whether a launch is alive: heartbeats, and the reconciler's notes on silent ones.

A launch is alive while its heartbeat key exists (``workers.heartbeat`` beats it); the
reconciler notes when it first found a revision without one and relaunches it once
that has lasted long enough.  Keys only, with TTLs: nothing here grows with history.
"""

from __future__ import annotations

from collections.abc import Collection

import redis

from shared.keys import Keys


class Liveness:
    def __init__(self, client: redis.Redis, prefix: str = "taskenv") -> None:
        self.r = client
        self.keys = Keys(prefix)

    def heartbeat(self, task_id: str, revision: int, ttl: int) -> None:
        """A launch is alive for ``ttl`` more seconds."""
        self.heartbeats([(task_id, revision)], ttl)

    def heartbeats(self, launches: Collection[tuple[str, int]], ttl: int) -> None:
        """Several launches (task id, revision) are alive for ``ttl`` more seconds: one
        round trip."""
        pipe = self.r.pipeline(transaction=False)
        for task_id, revision in launches:
            pipe.set(self.keys.beat(task_id, revision), "1", ex=ttl)
        try:
            pipe.execute()
        except redis.exceptions.OutOfMemoryError:
            # Redis is full and refuses SET; EXPIRE, which needs no memory, it allows:
            # a heartbeat that already exists lives on, so no running task looks dead.
            pipe = self.r.pipeline(transaction=False)
            for task_id, revision in launches:
                pipe.expire(self.keys.beat(task_id, revision), ttl)
            pipe.execute()

    def claim_requeue(self, task_id: str, revision: int, state: str, ttl: int) -> bool:
        """True at most once per ``ttl`` seconds for one task revision in one state."""
        key = self.keys.requeue_claim(task_id, revision, state)
        return bool(self.r.set(key, "1", nx=True, ex=max(1, ttl)))

    def dead_for(self, task_id: str, revision: int, now: float, forget_after: int) -> float:
        """Seconds since a reconciler first found this revision without a heartbeat."""
        key = self.keys.suspect(task_id, revision)
        self.r.set(key, repr(now), nx=True, ex=max(1, forget_after))
        first = self.r.get(key)
        return now - float(first) if first is not None else 0.0

    def seen_alive(self, task_id: str, revision: int) -> None:
        self.r.delete(self.keys.suspect(task_id, revision))

    def is_alive(self, task_id: str, revision: int) -> bool:
        return bool(self.r.exists(self.keys.beat(task_id, revision)))

    def stop_heartbeat(self, task_id: str, revision: int) -> None:
        self.r.delete(self.keys.beat(task_id, revision))
